"""What retention needs of a backend: move old terminal jobs to the archive (the prune),
delete archived jobs past their expiry (the archive expiry), and read an archived job back.

A pruned job leaves ``jobs`` with its attempts (they move to ``jobs_archive`` and
``job_attempts_archive``); its events are deleted, by design. Every call works in bounded
batches that commit one by one, so a prune of millions of rows never holds one long
transaction, and two prunes running at once (a rolling deploy's two leaders) move each row
once. Time predicates run on the backend's clock.

The archive is kept in time partitions: an archived job is readable until its ``expire_at``
and its row is removed once the partition holding that ``expire_at`` has ended
(``archive_storage_ends``), a whole partition at a time (PostgreSQL drops it). A partition
spans ``archive_partition_days(archive_for)`` UTC days, so a job stays stored at most that
long past its ``expire_at`` but is never read after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
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


# About this many partitions hold an archive at a time, whatever its retention: each read
# of the archive by id visits (and locks) every one of them.
ARCHIVE_PARTITIONS = 30
ARCHIVE_PARTITION_MAX_DAYS = 28
_EPOCH = date(1970, 1, 1)


def archive_partition_days(archive_for: timedelta) -> int:
    """How many UTC days one archive partition spans for jobs archived for ``archive_for``:
    a day up to 30 days of retention, then a thirtieth of it (13 days for a year), at most
    28."""
    days = -(-archive_for // timedelta(days=ARCHIVE_PARTITIONS))  # ceiling
    return max(1, min(ARCHIVE_PARTITION_MAX_DAYS, days))


def archive_range(day: date, width: int) -> tuple[date, date]:
    """The aligned range ``[starts, ends)`` of ``width`` days holding ``day``: ranges of one
    width tile the calendar from 1970-01-01, so every prune of that width finds the same."""
    starts = day - timedelta(days=(day - _EPOCH).days % width)
    return starts, starts + timedelta(days=width)


def archive_storage_ends(expire_at: datetime, archived_at: datetime) -> datetime:
    """When the archive expiry removes a job archived at ``archived_at`` until ``expire_at``:
    the end of the partition range holding ``expire_at``'s UTC day (PostgreSQL drops it
    whole; a range clipped by a neighbour of another width ends sooner there)."""
    width = archive_partition_days(expire_at - archived_at)
    _, ends = archive_range(expire_at.astimezone(UTC).date(), width)
    return datetime.combine(ends, time(), tzinfo=UTC)


def archive_readable(expire_at: datetime, now: datetime) -> bool:
    """Whether an archived job is still read back at ``now``: up to its ``expire_at``."""
    return now <= expire_at


# Both backends restate these signatures on purpose (the package docstring says why); the
# contracts are written here only.
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
        (``archive_storage_ends``: the partition range of their ``expire_at`` is over);
        returns how many jobs were deleted. PG: each ended range's partitions are dropped
        whole (one step whatever their size), then the default partition's rows of ended
        days are deleted ``batch_size`` per committed batch. ``on_batch`` is called after
        each step with the jobs it removed."""

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
