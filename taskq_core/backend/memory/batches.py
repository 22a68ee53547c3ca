"""Batches in memory: the batch rows, the outcome hook, the children's counts and the sweeps.

Every method awaits nothing that suspends, so each is atomic, as the Postgres part's
transaction is: a hook decides and writes the batch, its cancelled children and its finalizer
in one step. Children are the jobs whose ``metadata.batch_id`` is the batch's id as text (the
Postgres part's index key); the stored jobs are scanned, this backend being for tests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import structlog

# Mirrors postgres/batches.py on purpose: both implement protocol.batches, so they import the same
# names and restate the same signatures.
from taskq_core.backend.protocol.batches import (
    BATCH_ABORT_MESSAGE,
    BATCH_ID_KEY,
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
from taskq_core.statemachine import ACTIVE_STATUSES, JobStatus

from .enqueue import add_job
from .jsonb import as_json
from .store import PENDING, SCHEDULED, BatchRecord, JobRecord, MemoryStore

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="memory_backend")


class BatchPart(MemoryStore):
    """``create_batch``, ``apply_batch_outcomes``, ``get_batch``, ``count_batch_jobs``,
    ``list_batches``, ``complete_stale_batches`` and ``prune_old_batches``."""

    # --- reads of the children -----------------------------------------------------------------
    def _children(self, batch_id: UUID) -> list[JobRecord]:
        """The batch's children in the jobs table (not the archive, not uncommitted ones)."""
        key = str(batch_id)
        return [job for job in self._jobs.values() if job.metadata.get(BATCH_ID_KEY) == key]

    def _any_unfinished(self, batch_id: UUID) -> bool:
        """Whether some child is pending, scheduled or running."""
        key = str(batch_id)
        return any(
            job.status in ACTIVE_STATUSES and job.metadata.get(BATCH_ID_KEY) == key
            for job in self._jobs.values()
        )

    async def count_batch_jobs(self, batch_id: UUID) -> BatchCounts:
        return _counts(self._children(batch_id))

    async def list_batch_jobs(
        self, batch_id: UUID, statuses: Collection[JobStatus] | None = None, limit: int = 20
    ) -> list[JobSummary]:
        children = [
            job for job in self._children(batch_id) if statuses is None or job.status in statuses
        ]
        children.sort(key=lambda job: (job.finished_at or job.created_at, job.id), reverse=True)
        return [job.summary() for job in children[:limit]]

    # --- rows ----------------------------------------------------------------------------------
    async def create_batch(self, batch: NewBatch, *, connection: Any = None) -> BatchRow:
        # With ``connection`` the row appears when that transaction commits, with the children.
        finalizer = stored_finalizer(batch, self.max_payload_bytes)
        handle = None if connection is None else self._transaction_handle(connection)
        if batch.id in self._batches or (handle is not None and batch.id in handle.batches):
            raise ValueError(f"a batch with id {batch.id} already exists")
        # Alike supervisor/schema.py's RestartPolicy in _resolve by shape only: keyword fields.
        record = BatchRecord(
            id=batch.id,
            queue=batch.queue,
            status=BatchStatus.ACTIVE,
            expected_size=batch.expected_size,
            outcomes_left=batch.expected_size,
            failure_threshold=batch.failure_threshold,
            finalizer=None if finalizer is None else as_json(finalizer),
            metadata=as_json(batch.metadata),
            created_at=self._now(),
        )
        if handle is None:
            self._batches[record.id] = record
        else:
            handle.batches.add(record.id)
            handle.on_commit.append(lambda: self._batches.setdefault(record.id, record))
        return record.snapshot()

    async def get_batch(self, batch_id: UUID) -> BatchRow | None:
        record = self._batches.get(batch_id)
        return None if record is None else record.snapshot()

    async def list_batches(self, filter: BatchFilter) -> list[tuple[BatchRow, BatchCounts]]:
        found = [
            record
            for record in self._batches.values()
            if (filter.queue is None or record.queue == filter.queue)
            and (filter.batch_id is None or record.id == filter.batch_id)
            and (filter.active is None or (record.status is BatchStatus.ACTIVE) == filter.active)
        ]
        found.sort(key=lambda record: (record.created_at, record.id), reverse=True)
        chosen = found[: filter.limit]
        children: dict[Any, list[JobRecord]] = {str(record.id): [] for record in chosen}
        for job in self._jobs.values():  # one pass for every batch listed
            siblings = children.get(job.metadata.get(BATCH_ID_KEY))
            if siblings is not None:
                siblings.append(job)
        return [(record.snapshot(), _counts(children[str(record.id)])) for record in chosen]

    # --- the hook and the sweeps ---------------------------------------------------------------
    async def apply_batch_outcomes(self, outcomes: Sequence[BatchOutcome]) -> list[BatchTransition]:
        transitions: list[BatchTransition] = []
        for batch_id, tally in outcomes_by_batch(outcomes).items():
            record = self._batches.get(batch_id)
            if record is None or record.status is not BatchStatus.ACTIVE:
                continue
            count, abort = count_failures(
                record.consecutive_failures, record.failure_threshold, tally.statuses
            )
            record.consecutive_failures = count
            record.outcomes_left -= tally.ended
            if abort:
                transitions.append(self._leave(record, BatchStatus.ABORTED))
            elif record.outcomes_left <= 0 and not self._any_unfinished(batch_id):
                transitions.append(self._leave(record, BatchStatus.COMPLETE))
        return transitions

    async def complete_stale_batches(self, limit: int = 100) -> list[BatchTransition]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        active = sorted(
            (r for r in self._batches.values() if r.status is BatchStatus.ACTIVE),
            key=lambda record: (record.created_at, record.id),
        )
        done = [r for r in active if not self._any_unfinished(r.id)][:limit]
        return [self._leave(record, BatchStatus.COMPLETE) for record in done]

    async def prune_old_batches(self, older_than: timedelta, *, batch_size: int = 1000) -> int:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        cutoff = self._now() - older_than
        with_children = {job.metadata.get(BATCH_ID_KEY) for job in self._jobs.values()}
        due = [
            record.id
            for record in self._batches.values()
            if record.status is not BatchStatus.ACTIVE
            and record.completed_at is not None
            and record.completed_at < cutoff
            and str(record.id) not in with_children
        ]
        for batch_id in due:
            del self._batches[batch_id]
        return len(due)

    def _leave(self, record: BatchRecord, status: BatchStatus) -> BatchTransition:
        """``record`` leaves ``active`` now: its finalizer (if any) is enqueued, and an abort
        cancels the waiting children. The finalizer goes first: the only step that can raise,
        so nothing is written when it does."""
        finalizer_job_id = self._enqueue_finalizer(record)
        cancelled = self._cancel_waiting_children(record.id) if status is BatchStatus.ABORTED else 0
        record.status = status
        record.completed_at = self._now()
        record.finalizer_job_id = finalizer_job_id
        return BatchTransition(record.id, status, cancelled, finalizer_job_id)

    def _cancel_waiting_children(self, batch_id: UUID) -> int:
        """Pending and scheduled children -> cancelled, as an operator's cancel ends them
        (request time and reason on the row), with the abort's message and a state_change
        event; running children finish."""
        now = self._now()
        waiting = [job for job in self._children(batch_id) if job.status in (PENDING, SCHEDULED)]
        for job in waiting:
            job.cancel_requested_at = now
            job.cancel_reason = BATCH_ABORT_MESSAGE
            job.error_message = BATCH_ABORT_MESSAGE
            detail = {"reason": BATCH_ABORT_MESSAGE, "batch_id": str(batch_id)}
            self._transition(job, JobStatus.CANCELLED, detail=detail)
        return len(waiting)

    def _enqueue_finalizer(self, record: BatchRecord) -> UUID | None:
        """Enqueue the batch's finalizer under its fixed id, as ``enqueue`` does (the same job
        already there comes back; another job under the id is ValueError); None without one,
        or when its unique key is held by another job or its payload is over this backend's
        limit (refused as any enqueue would be)."""
        if record.finalizer is None:
            return None
        args = finalizer_from_json(record.finalizer)
        try:
            return add_job(self, args, None).id
        except (SingletonCollisionError, PayloadTooLargeError) as exc:
            _log.warning("batch_finalizer_refused", batch_id=str(record.id), error=str(exc))
            return None


def _counts(children: list[JobRecord]) -> BatchCounts:
    """Children by status, in JobStatus order (as the Postgres part returns them)."""
    found = Counter(job.status for job in children)
    return BatchCounts({status: found[status] for status in JobStatus if status in found})
