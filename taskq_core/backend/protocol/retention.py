"""What retention needs of a backend: move old terminal jobs to the archive (the prune),
delete archived jobs past their expiry (the archive expiry), and read an archived job back.

A pruned job leaves ``jobs`` with its attempts (they move to ``jobs_archive`` and
``job_attempts_archive``); its events are deleted, by design. Every call works in bounded
batches that commit one by one, so a prune of millions of rows never holds one long
transaction, and two prunes running at once (a rolling deploy's two leaders) move each row
once. Time predicates run on the backend's clock.

The archive is kept by day: an archived job is readable until its ``expire_at`` and its row is
removed once the UTC day of that ``expire_at`` has ended (``archive_storage_ends``), a whole
day at a time (PostgreSQL keeps one partition per day and drops it), so it stays stored up to
a day past ``expire_at`` but is never read after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.values import AttemptRow, JobRow
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus


@dataclass(frozen=True)
class PrunePolicy:
    """Which terminal jobs a prune moves, and how long the archive keeps them.

    ``retention``: for each terminal status to prune, how long a job of that status stays in
    ``jobs`` after ``finished_at``; statuses left out are not pruned. ``archive_for``: an
    archived job's ``expire_at`` is its ``archived_at`` plus this. ``batch_size``: the most
    jobs one batch (one transaction) moves. ``queue``: only this queue when set.
    """

    retention: Mapping[JobStatus, timedelta]
    archive_for: timedelta
    batch_size: int = 10_000
    queue: str | None = None

    def __post_init__(self) -> None:
        for status, keep in self.retention.items():
            if status not in TERMINAL_STATUSES:
                raise ValueError(f"only terminal jobs are pruned, not {status.value}")
            if keep <= timedelta(0):
                raise ValueError(f"retention of {status.value} jobs must be positive, got {keep}")
        if self.archive_for <= timedelta(0):
            raise ValueError(f"archive_for must be positive, got {self.archive_for}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")


@dataclass(frozen=True)
class PruneResult:
    """What a prune moved (or, dry, would move): jobs per (status, queue), and the batches
    it committed (0 for a dry run)."""

    moved: dict[tuple[JobStatus, str], int] = field(default_factory=dict)
    batches: int = 0

    @property
    def total(self) -> int:
        """Every job moved."""
        return sum(self.moved.values())


@dataclass(frozen=True, slots=True)
class ArchivedJob:
    """A job in the archive: its row as it was when pruned, and when it leaves for good."""

    job: JobRow
    archived_at: datetime
    expire_at: datetime


def archive_storage_ends(expire_at: datetime) -> datetime:
    """When the archive expiry removes a job archived until ``expire_at``: the end of that
    instant's UTC day (PostgreSQL's partition of the day, dropped whole)."""
    day = expire_at.astimezone(UTC).date()
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)


def archive_readable(expire_at: datetime, now: datetime) -> bool:
    """Whether an archived job is still read back at ``now``: up to its ``expire_at``."""
    return now <= expire_at


@runtime_checkable
class RetentionBackend(Protocol):
    """The prune, the archive expiry and reads of archived jobs."""

    async def prune_jobs(
        self,
        policy: PrunePolicy,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> PruneResult:
        """Move every terminal job whose ``finished_at`` is older than its status's retention
        to the archive, ``policy.batch_size`` jobs per committed batch: the job row to
        ``jobs_archive`` (``archived_at`` now, ``expire_at`` now + ``archive_for``), its
        attempts to ``job_attempts_archive``, its events deleted. Jobs that are not terminal
        are never touched. A workflow's steps never move alone: nothing of a running workflow
        moves, and an ended one moves whole, in one batch (alone in it when it has more steps
        than a batch holds), with its row and edges, once its end is older than the longest
        retention among its steps' statuses (the rule in full: the Postgres part's
        sql/retention.sql). ``dry_run``: count what would move, move nothing. ``on_batch`` is
        called after each committed batch with the number of jobs it moved (a progress bar)."""

    async def expire_archive(
        self, batch_size: int, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        """Delete archived jobs (and their archived attempts) whose storage has ended
        (``archive_storage_ends``: the UTC day of their ``expire_at`` is over); returns how
        many jobs were deleted. PG: each ended day's partitions are dropped whole (one step
        whatever their size), then rows outside day partitions are deleted ``batch_size`` per
        committed batch. ``on_batch`` is called after each step with the jobs it removed."""

    def sweep_lock(self, name: str) -> AbstractAsyncContextManager[bool]:
        """Hold the cluster-wide lock ``name`` (``taskq:prune``, ``taskq:archive_expiry``)
        for the body of an ``async with``, which receives True when this caller got it and
        False when another holder (a second leader during a rolling deploy, an operator's
        ``taskq prune``) has it; the body then skips its run. PG: a session advisory lock
        per schema on one pooled connection, released at exit or when that session ends."""

    async def get_archived_job(self, job_id: UUID) -> ArchivedJob | None:
        """One archived job, or None when the archive does not hold it (or holds it past its
        ``expire_at``, until the expiry removes it)."""

    async def get_archived_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """The attempts of an archived job, oldest first (empty when ``get_archived_job``
        answers None)."""
