"""Batches on PostgreSQL: the batch rows, the outcome hook, the children's counts and the
batch sweeps (sql/batches.sql).

The hook is one transaction: lock the active rows of the batches it names (id order), fold
the outcomes into each counter (``count_failures``, the outcome table's one home), then one
statement aborts, completes or only counts each batch; a batch that left ``active`` gets its
finalizer through ``enqueue`` on the same connection, so the finalizer commits with the
batch's end, once: the row lock makes a second hook wait and then find the batch ended.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import structlog

# Mirrors memory/batches.py on purpose: both implement protocol.batches, so they import the same
# names and restate the same signatures.
from taskq_core.backend.protocol.batches import (
    BATCH_ABORT_MESSAGE,
    BatchCounts,
    BatchFilter,
    BatchOutcome,
    BatchRow,
    BatchStatus,
    BatchTransition,
    NewBatch,
    count_failures,
    finalizer_from_json,
    outcomes_by_batch,
    stored_finalizer,
)
from taskq_core.backend.protocol.values import JobSummary
from taskq_core.errors import PayloadTooLargeError, SingletonCollisionError
from taskq_core.statemachine import JobStatus

from . import bulk, rows
from .core import BackendCore
from .enqueue import enqueue_job

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")


def _counts(statuses: list[str] | None, counts: list[int] | None) -> BatchCounts:
    """Parallel arrays (NULL for a batch without children) as BatchCounts in status order."""
    return BatchCounts(rows.status_counts(statuses or [], counts or []))


class BatchPart(BackendCore):
    """``create_batch``, ``apply_batch_outcomes``, ``get_batch``, ``count_batch_jobs``,
    ``list_batches``, ``complete_stale_batches`` and ``prune_old_batches``."""

    async def create_batch(self, batch: NewBatch, *, connection: Any = None) -> BatchRow:
        # The finalizer is stored, not enqueued.
        finalizer = stored_finalizer(batch, self.max_payload_bytes)
        executor: Any = self._pool if connection is None else connection
        record = await executor.fetchrow(
            self._queries["create_batch"],
            batch.id,
            batch.queue,
            batch.expected_size,
            batch.failure_threshold,
            None if finalizer is None else bulk.dumps(finalizer),
            bulk.dumps(batch.metadata),
        )
        if record is None:
            raise ValueError(f"a batch with id {batch.id} already exists")
        return rows.batch(record)

    async def get_batch(self, batch_id: UUID) -> BatchRow | None:
        record = await self._pool.fetchrow(self._queries["get_batch"], batch_id)
        return None if record is None else rows.batch(record)

    async def count_batch_jobs(self, batch_id: UUID) -> BatchCounts:
        records = await self._pool.fetch(self._queries["count_batch_jobs"], batch_id)
        return _counts([r["status"] for r in records], [r["count"] for r in records])

    async def list_batch_jobs(
        self, batch_id: UUID, statuses: Collection[JobStatus] | None = None, limit: int = 20
    ) -> list[JobSummary]:
        names = None if statuses is None else sorted(status.value for status in statuses)
        records = await self._pool.fetch(self._queries["list_batch_jobs"], batch_id, names, limit)
        return [rows.job_summary(r) for r in records]

    async def list_batches(self, filter: BatchFilter) -> list[tuple[BatchRow, BatchCounts]]:
        query = self._queries["list_batches"]
        records = await self._pool.fetch(
            query, filter.queue, filter.active, filter.batch_id, filter.limit
        )
        return [(rows.batch(r), _counts(r["statuses"], r["counts"])) for r in records]

    async def apply_batch_outcomes(self, outcomes: Sequence[BatchOutcome]) -> list[BatchTransition]:
        # One transaction.
        grouped = outcomes_by_batch(outcomes)
        if not grouped:
            return []
        async with self._pool.acquire() as conn, conn.transaction():
            locked = await conn.fetch(self._queries["lock_active_batches"], list(grouped))
            if not locked:
                return []
            folded = [
                count_failures(
                    r["consecutive_failures"], r["failure_threshold"], grouped[r["id"]].statuses
                )
                for r in locked
            ]
            settled = await conn.fetch(
                self._queries["settle_batches"],
                [r["id"] for r in locked],
                [count for count, _ in folded],
                [abort for _, abort in folded],
                BATCH_ABORT_MESSAGE,
                [r["outcomes_left"] - grouped[r["id"]].ended for r in locked],
            )
            moved = await self._end_batches(conn, settled)
        return [moved[batch_id] for batch_id in grouped if batch_id in moved]

    async def complete_stale_batches(self, limit: int = 100) -> list[BatchTransition]:
        # One transaction.
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        async with self._pool.acquire() as conn, conn.transaction():
            done = await conn.fetch(self._queries["complete_stale_batches"], limit)
            done = sorted(done, key=lambda r: (r["created_at"], r["id"]))
            ended = [
                {"id": r["id"], "status": "complete", "finalizer": r["finalizer"], "cancelled": 0}
                for r in done
            ]
            moved = await self._end_batches(conn, ended)
        return [moved[r["id"]] for r in done]

    async def prune_old_batches(self, older_than: timedelta, *, batch_size: int = 1000) -> int:
        # On the database clock, ``batch_size`` per committed batch.
        return await self._in_batches("prune_old_batches", batch_size, older_than)

    async def _end_batches(self, conn: Any, settled: Sequence[Any]) -> dict[UUID, BatchTransition]:
        """The transitions of the batches in ``settled`` that left ``active``, their
        finalizers enqueued on ``conn`` (the caller's transaction) and recorded on the row."""
        moved: dict[UUID, BatchTransition] = {}
        made: dict[UUID, UUID] = {}
        for record in settled:
            status = BatchStatus(record["status"])
            if status is BatchStatus.ACTIVE:
                continue
            batch_id: UUID = record["id"]
            job_id = await self._enqueue_finalizer(conn, batch_id, record["finalizer"])
            if job_id is not None:
                made[batch_id] = job_id
            moved[batch_id] = BatchTransition(batch_id, status, record["cancelled"], job_id)
        if made:
            query = self._queries["set_batch_finalizers"]
            await conn.execute(query, list(made), list(made.values()))
        return moved

    async def _enqueue_finalizer(
        self, conn: Any, batch_id: UUID, stored: str | None
    ) -> UUID | None:
        """Enqueue a stored finalizer on ``conn`` under its fixed id, through ``enqueue``
        (idempotent on the id; another job under it is ValueError). None without one, or
        when another job holds its unique key or its payload is over this backend's limit
        (a worker's TASKQ_MAX_PAYLOAD_BYTES below the one it was stored under): refused as
        any enqueue is, and the batch ends all the same (the refusal is a Python-side
        answer, the transaction goes on)."""
        if stored is None:
            return None
        args = finalizer_from_json(json.loads(stored))
        try:
            job = await enqueue_job(self, args, connection=conn)
        except (SingletonCollisionError, PayloadTooLargeError) as exc:
            _log.warning("batch_finalizer_refused", batch_id=str(batch_id), error=str(exc))
            return None
        return job.id
