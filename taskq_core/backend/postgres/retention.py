"""Retention on PostgreSQL: the prune to the archive (Sweep 5), archive expiry (Sweep 6) and
reads of archived jobs. Every batch is one statement committed on its own (sql/retention.sql).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

import asyncpg

from taskq_core.backend.protocol import AttemptRow
from taskq_core.backend.protocol.retention import ArchivedJob, PrunePolicy, PruneResult
from taskq_core.statemachine import JobStatus

from . import rows
from .core import BackendCore


def _rules(policy: PrunePolicy) -> tuple[list[str], list[timedelta], str | None]:
    """The policy as the statements' parameters: statuses and retentions as parallel arrays."""
    statuses = list(policy.retention)
    return [s.value for s in statuses], [policy.retention[s] for s in statuses], policy.queue


def _add_counts(moved: dict[tuple[JobStatus, str], int], records: Iterable[asyncpg.Record]) -> int:
    """Add one statement's (status, queue, count) rows into ``moved``; return their sum."""
    total = 0
    for record in records:
        key = (JobStatus(record["status"]), record["queue"])
        moved[key] = moved.get(key, 0) + record["count"]
        total += record["count"]
    return total


class RetentionPart(BackendCore):
    """Sweep 5 (prune), Sweep 6 (archive expiry) and the archived reads."""

    async def prune_jobs(self, policy: PrunePolicy, *, dry_run: bool = False) -> PruneResult:
        """Move due terminal jobs to the archive, ``policy.batch_size`` per committed batch,
        until a batch moves fewer than that; ``dry_run`` counts them in one query instead."""
        moved: dict[tuple[JobStatus, str], int] = {}
        statuses, keeps, queue = _rules(policy)
        if dry_run:
            records = await self._pool.fetch(
                self._queries["prune_jobs_count"], statuses, keeps, queue
            )
            _add_counts(moved, records)
            return PruneResult(moved, 0)
        batches = 0
        while True:
            # Each fetch outside a transaction block commits on its own: one batch, one commit.
            records = await self._pool.fetch(
                self._queries["prune_jobs_batch"],
                statuses,
                keeps,
                queue,
                policy.batch_size,
                policy.archive_for,
            )
            batches += 1
            if _add_counts(moved, records) < policy.batch_size:
                return PruneResult(moved, batches)

    async def expire_archive(self, batch_size: int) -> int:
        """Delete archived jobs past ``expire_at`` (their attempts cascade), ``batch_size``
        per committed batch; returns how many were deleted."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        deleted = 0
        while True:
            count: int = await self._pool.fetchval(
                self._queries["expire_archive_batch"], batch_size
            )
            deleted += count
            if count < batch_size:
                return deleted

    async def get_archived_job(self, job_id: UUID) -> ArchivedJob | None:
        """One archived job (its row built as a live job's), or None."""
        record = await self._pool.fetchrow(self._queries["get_archived_job"], job_id)
        if record is None:
            return None
        return ArchivedJob(rows.job(record), record["archived_at"], record["expire_at"])

    async def get_archived_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """The attempts of an archived job, oldest first."""
        records = await self._pool.fetch(self._queries["get_archived_attempts"], job_id)
        return [rows.attempt(r) for r in records]
