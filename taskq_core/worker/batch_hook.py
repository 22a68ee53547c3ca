"""The batch hook on the worker's side: after a batched job's terminal write has committed,
tell the backend (``apply_batch_outcomes``), which may end the batch and enqueue its
finalizer.

A job outside a batch costs one dict lookup (its ``metadata.batch_id``), nothing more. The
hook runs while the job is still held (``ActiveJobs``), so ``--until-idle`` cannot see the
fleet idle between the last child's write and its finalizer's insert. It never raises on
database trouble: the job's outcome is already written, and the leader's
``complete_stale_batches`` ends a batch whose hook was lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.batches import BatchOutcome, batch_id_of
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

# What a rescheduling write (snooze, retry-after) may end in instead of ``scheduled``.
_RESCHEDULE_ENDS = {"cancelled": JobStatus.CANCELLED, "failed": JobStatus.FAILED}


def outcome_of(job: JobRow, status: JobStatus | None) -> BatchOutcome | None:
    """The hook's input for ``job`` written as ``status``; None when the job is not a batch
    child or the write was not terminal (or changed nothing)."""
    if status is None or status not in TERMINAL_STATUSES:
        return None
    batch_id = batch_id_of(job.metadata)
    if batch_id is None:
        return None
    return BatchOutcome(batch_id, status)


def status_of_row(row: JobRow | None) -> JobStatus | None:
    """``mark_failed_or_retry``'s answer as a status (None: the lease was gone)."""
    return None if row is None else row.status


def status_if_cancelled(written: bool) -> JobStatus | None:
    """``mark_cancelled``'s answer as a status."""
    return JobStatus.CANCELLED if written else None


def status_of_reschedule(outcome: str) -> JobStatus | None:
    """A snooze's or retry-after's outcome (``failed:DeadlineExceeded`` included) as a status:
    terminal only when a requested cancel or a deadline ended the job."""
    return _RESCHEDULE_ENDS.get(outcome.split(":", 1)[0])


async def apply_outcomes(backend: Backend, log: Any, outcomes: Sequence[BatchOutcome]) -> None:
    """Apply committed terminal outcomes to their batches; log what ended. A failure is
    logged and left to the leader's sweep (shielded: a worker shutting down does not cut
    the batch's transaction short)."""
    if not outcomes:
        return
    try:
        transitions = await asyncio.shield(backend.apply_batch_outcomes(outcomes))
    except Exception as exc:
        log.warning(
            "batch_hook_failed",
            batches=sorted({str(outcome.batch_id) for outcome in outcomes}),
            error=f"{type(exc).__name__}: {exc}",
            note="the outcomes are written; the leader's sweep ends the batch if it is done",
        )
        return
    for ended in transitions:
        finalizer = ended.finalizer_job_id
        log.info(
            "batch_ended",
            batch_id=str(ended.batch_id),
            status=ended.status.value,
            cancelled_children=ended.cancelled_children,
            finalizer_job_id=None if finalizer is None else str(finalizer),
        )


async def after_terminal_write(
    backend: Backend, log: Any, job: JobRow, status: JobStatus | None
) -> None:
    """The hook for one job's committed write (nothing for a job outside a batch)."""
    outcome = outcome_of(job, status)
    if outcome is not None:
        await apply_outcomes(backend, log, [outcome])
