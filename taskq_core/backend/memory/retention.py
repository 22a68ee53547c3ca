"""Retention: the prune (old terminal jobs to the archive, with their attempts, deleting
their events) and the archive expiry (archived jobs past ``expire_at``), the sweep locks that keep
either from running twice at once, and reads of the archive.

Both sweeps work batch by batch, as PostgreSQL commits them: a batch is one step that does
not await (atomic, as one transaction is), and the sweep yields to the event loop between
batches, so other coroutines (dispatch, a second prune) run in between, as they would
between two commits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from uuid import UUID

from taskq_core.backend.protocol import (
    ArchivedJob,
    AttemptRow,
    PrunePolicy,
    PruneResult,
)
from taskq_core.statemachine import JobStatus

from .store import ArchivedRecord, JobRecord, MemoryStore


async def in_batches(
    batch_size: int, take: Callable[[], int], on_batch: Callable[[int], None] | None = None
) -> int:
    """Run ``take`` (one batch's writes, without awaiting: atomic, as a transaction is; it
    returns how many rows it touched) until a batch touches fewer than ``batch_size``,
    yielding to the event loop between batches as PostgreSQL commits between them (the
    Postgres part's ``BackendCore._in_batches``). Returns the rows touched in all."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    total = 0
    while True:
        count = take()
        total += count
        if on_batch is not None:
            on_batch(count)
        if count < batch_size:
            return total
        await asyncio.sleep(0)  # a commit point: let other work run between batches


class RetentionPart(MemoryStore):
    """``prune_jobs``, ``expire_archive``, ``sweep_lock``, ``get_archived_job`` and
    ``get_archived_attempts``."""

    async def prune_jobs(
        self,
        policy: PrunePolicy,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> PruneResult:
        if dry_run:
            counts = Counter((job.status, job.queue) for job in self._prunable(policy, None))
            return PruneResult(moved=dict(counts), batches=0)
        moved: Counter[tuple[JobStatus, str]] = Counter()
        batches = 0

        def archive_batch() -> int:
            nonlocal batches
            batch = self._prunable(policy, policy.batch_size)
            if batch:
                self._archive(batch, policy)
                moved.update((job.status, job.queue) for job in batch)
            batches += 1
            return len(batch)

        await in_batches(policy.batch_size, archive_batch, on_batch)
        return PruneResult(moved=dict(moved), batches=batches)

    async def expire_archive(
        self, batch_size: int, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        def delete_batch() -> int:
            now = self._now()
            expired = [
                job_id
                for job_id, archived in self._archived_jobs.items()
                if archived.expire_at < now
            ][:batch_size]
            for job_id in expired:
                del self._archived_jobs[job_id]
                self._archived_attempts.pop(job_id, None)
            return len(expired)

        return await in_batches(batch_size, delete_batch, on_batch)

    def sweep_lock(self, name: str) -> AbstractAsyncContextManager[bool]:
        # Held per backend instance (PG: a session advisory lock per schema).
        return self._sweep_lock(name)

    @asynccontextmanager
    async def _sweep_lock(self, name: str) -> AsyncIterator[bool]:
        if name in self._sweep_locks:
            yield False
            return
        self._sweep_locks.add(name)
        try:
            yield True
        finally:
            self._sweep_locks.discard(name)

    async def get_archived_job(self, job_id: UUID) -> ArchivedJob | None:
        archived = self._archived_jobs.get(job_id)
        if archived is None:
            return None
        return ArchivedJob(archived.job.snapshot(), archived.archived_at, archived.expire_at)

    async def get_archived_attempts(self, job_id: UUID) -> list[AttemptRow]:
        return list(self._archived_attempts.get(job_id, []))

    # --- one batch ---------------------------------------------------------------------------
    def _prunable(self, policy: PrunePolicy, limit: int | None) -> list[JobRecord]:
        """Terminal jobs whose ``finished_at`` is older than their status's retention (in the
        policy's queue when set), oldest finished first, at most ``limit``."""
        now = self._now()
        found = [
            job
            for job in self._jobs.values()
            if job.status in policy.retention
            and job.finished_at is not None
            and job.finished_at < now - policy.retention[job.status]
            and (policy.queue is None or job.queue == policy.queue)
        ]
        found.sort(key=_finished_order)
        return found if limit is None else found[:limit]

    def _archive(self, batch: list[JobRecord], policy: PrunePolicy) -> None:
        """One atomic batch: each job leaves ``_jobs`` for the archive with its attempts, and
        its events are deleted (history a pruned job no longer needs, by design)."""
        now = self._now()
        for job in batch:
            del self._jobs[job.id]
            self._archived_jobs[job.id] = ArchivedRecord(job, now, now + policy.archive_for)
            self._archived_attempts[job.id] = self._attempts.pop(job.id, [])
        gone = {job.id for job in batch}
        self._events = [event for event in self._events if event.job_id not in gone]


def _finished_order(job: JobRecord) -> tuple[datetime, UUID]:
    """Oldest finished first, ties by id: the order a prune moves jobs in."""
    assert job.finished_at is not None  # only terminal jobs with a finished_at are prunable
    return job.finished_at, job.id
