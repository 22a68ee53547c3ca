"""The end hook on the worker's side: after a batch child's or a workflow step's terminal
write has committed, tell the backend: ``apply_batch_outcomes`` may end the batch and enqueue
its finalizer, ``release_workflow_steps`` decides the steps that wait on the job.

A job outside a batch and a workflow costs two dict lookups (its ``metadata.batch_id`` and
``metadata.workflow_id``), nothing more. A batch child's or a step's outcome goes to the
worker's one ``HookPipe`` (the completer's successes, one counted outcome per batch per
flush; the consumer's other endings and the cancel controller's abandons, one per job),
which applies outcomes in the order they came: the first waits
``HOOK_LINGER`` for others, then one call applies all. So a busy batch costs a worker one hook
call per linger, not one per job or per flush, and the workers of a fleet seldom queue for the
batch's row lock; and a success is never applied after a failure that came later from the same
worker (a failure policy counts failures in a row). A failure goes at once, with whatever waits
before it, and its consumer waits for it: it may abort the batch, and no other child should
start before the policy had its say. A workflow step's end goes at once too (the steps that
wait on it should not wait a linger more); ends that come while a call runs go in the next.

The job stays held (``ActiveJobs``) until its outcome was applied, so ``--until-idle``
cannot see the fleet idle between the last child's write and its finalizer's insert. The
hook never raises on database trouble: the outcome is already written, and the leader's
``complete_stale_batches`` ends a batch whose hook was lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.batches import (
    BATCH_ID_KEY,
    BatchOutcome,
    batch_id_of,
    parse_batch_id,
)
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY
from taskq_core.obs.metrics import count_batch_end, instruments
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.transient import shielded
from taskq_core.worker.waits import wait_any

# How long outcomes gather before one hook call applies them all, and how many make a call
# go at once: a busy batch costs one call per gathering, not one per job or per flush.
HOOK_LINGER = 0.05
HOOK_MAX_OUTCOMES = 2000
# What a rescheduling write (snooze, retry-after) may end in instead of ``scheduled``.
_RESCHEDULE_ENDS = {"cancelled": JobStatus.CANCELLED, "failed": JobStatus.FAILED}


@dataclass(frozen=True, slots=True)
class Ended:
    """A committed terminal write the hook applies: to the job's batch (``batch_id``), to
    its workflow (``in_workflow``), or both."""

    job_id: UUID
    status: JobStatus
    batch_id: UUID | None = None
    in_workflow: bool = False


# What the pipe applies: one job's end (Ended), or a run of a batch's children that ended
# alike (BatchOutcome with its count).
Outcome = Ended | BatchOutcome


def is_hooked(metadata: Mapping[str, Any]) -> bool:
    """Whether a job's terminal write goes to the hook: a batch child's or a step's."""
    return BATCH_ID_KEY in metadata or WORKFLOW_ID_KEY in metadata


def outcome_of(job: JobRow, status: JobStatus | None) -> Ended | None:
    """The hook's input for ``job`` written as ``status``; None when the job is neither a
    batch child nor a workflow step or the write was not terminal (or changed nothing)."""
    if status is None or status not in TERMINAL_STATUSES:
        return None
    batch_id = batch_id_of(job.metadata)
    in_workflow = WORKFLOW_ID_KEY in job.metadata
    if batch_id is None and not in_workflow:
        return None
    return Ended(job.id, status, batch_id, in_workflow)


def status_of_row(row: JobRow | None) -> JobStatus | None:
    """``mark_failed_or_retry``'s answer as a status (None: the lease was gone)."""
    return None if row is None else row.status


def status_as_written(status: JobStatus | None) -> JobStatus | None:
    """The answer of a write that returns the job's new status (``mark_interrupted``)."""
    return status


def status_if_cancelled(written: bool) -> JobStatus | None:
    """``mark_cancelled``'s answer as a status."""
    return JobStatus.CANCELLED if written else None


def status_of_reschedule(outcome: str) -> JobStatus | None:
    """A snooze's or retry-after's outcome (``failed:DeadlineExceeded`` included) as a status:
    terminal only when a requested cancel or a deadline ended the job."""
    return _RESCHEDULE_ENDS.get(outcome.split(":", 1)[0])


async def apply_outcomes(backend: Backend, log: Any, outcomes: Sequence[Outcome]) -> None:
    """Apply committed terminal outcomes to their batches and workflows; log what ended."""
    batched: list[BatchOutcome] = []
    steps: list[UUID] = []
    for o in outcomes:
        if isinstance(o, BatchOutcome):
            batched.append(o)
            continue
        if o.batch_id is not None:
            batched.append(BatchOutcome(o.batch_id, o.status))
        if o.in_workflow:
            steps.append(o.job_id)
    await _apply_to_batches(backend, log, batched)
    await _release_steps(backend, log, steps)


def succeeded_children(
    written: Sequence[ActiveJob],
) -> list[tuple[Outcome, Sequence[ActiveJob]]]:
    """The hook's input for the successes a flush wrote: one outcome per batch for its
    children (counted: a flush writes hundreds of one batch's), one per job for workflow
    steps; jobs of neither are left out (two lookups each)."""
    runs: dict[str, list[ActiveJob]] = {}  # by the batch id's text
    steps: list[tuple[Outcome, Sequence[ActiveJob]]] = []
    for holding in written:
        metadata = holding.job.metadata
        if WORKFLOW_ID_KEY in metadata:
            outcome = outcome_of(holding.job, JobStatus.SUCCEEDED)
            if outcome is not None:
                steps.append((outcome, [holding]))
            continue
        raw = metadata.get(BATCH_ID_KEY)
        if raw is not None:  # text, as written; anything else (any JSON value) as text
            runs.setdefault(raw if type(raw) is str else str(raw), []).append(holding)
    counted = [  # each run's id parsed once, not once a child
        (BatchOutcome(batch_id, JobStatus.SUCCEEDED, len(jobs)), jobs)
        for raw, jobs in runs.items()
        if (batch_id := parse_batch_id(raw)) is not None
    ]
    return [*steps, *counted]


async def _release_steps(backend: Backend, log: Any, ended: Sequence[UUID]) -> None:
    """Decide the steps that wait on the ``ended`` jobs. A failure is logged and left to
    the leader's sweep (shielded, as the batch's call)."""
    if not ended:
        return
    try:
        release = await shielded(backend.release_workflow_steps(ended))
    except Exception as exc:
        log.warning(
            "workflow_hook_failed",
            jobs=len(ended),
            error=f"{type(exc).__name__}: {exc}",
            note="the outcomes are written; the leader's sweep decides the waiting steps",
        )
        return
    for workflow_id, status in release.ended:
        log.info("workflow_ended", workflow_id=str(workflow_id), status=status.value)


# Shaped as _release_steps above on purpose: each hook call is shielded and its failure
# logged, not raised (a leader's sweep catches up); the calls and what they log differ.
async def _apply_to_batches(backend: Backend, log: Any, outcomes: Sequence[BatchOutcome]) -> None:
    """Apply outcomes to their batches; log what ended. A failure is logged and left to the
    leader's sweep (shielded: a worker shutting down does not cut the batch's transaction
    short)."""
    if not outcomes:
        return
    try:
        transitions = await shielded(backend.apply_batch_outcomes(outcomes))
    except Exception as exc:
        log.warning(
            "batch_hook_failed",
            batches=sorted({str(outcome.batch_id) for outcome in outcomes}),
            error=f"{type(exc).__name__}: {exc}",
            note="the outcomes are written; the leader's sweep ends the batch if it is done",
        )
        return
    for ended in transitions:
        count_batch_end(instruments(), ended.status.value, "hook")
        finalizer = ended.finalizer_job_id
        log.info(
            "batch_ended",
            batch_id=str(ended.batch_id),
            status=ended.status.value,
            cancelled_children=ended.cancelled_children,
            finalizer_job_id=None if finalizer is None else str(finalizer),
        )


class HookPipe:
    """The worker's one queue of batch and workflow outcomes whose writes have committed, applied in
    the order given: the first waits ``linger`` seconds for others (or until ``max_outcomes``
    wait, a failure comes, or the worker holds nothing else), then one call applies them all;
    each job stays held until its outcome was applied (or the call failed, logged)."""

    # Plain field assignments, alike the constructors of ParentWatch, Completer, LoopLagWatchdog,
    # EnqueuePlanner and FallbackLimiterStore (and obs/telemetry.py's build_telemetry's
    # signature) by shape only: other data.
    def __init__(
        self,
        backend: Backend,
        log: Any,
        holdings: ActiveJobs,
        *,
        linger: float = HOOK_LINGER,
        max_outcomes: int = HOOK_MAX_OUTCOMES,
    ) -> None:
        self.backend = backend
        self.log = log
        self.holdings = holdings
        self.linger = linger
        self.max_outcomes = max_outcomes
        # Each outcome, its jobs, and a future resolved once applied (None: nobody waits).
        self._waiting: list[tuple[Outcome, Sequence[ActiveJob], asyncio.Future[None] | None]] = []
        self._go = asyncio.Event()  # set: apply what waits without lingering
        self._task: asyncio.Task[None] | None = None

    def submit(self, outcomes: Sequence[tuple[Outcome, Sequence[ActiveJob]]]) -> None:
        """Queue outcomes; their jobs are released once applied."""
        self._add([(outcome, jobs, None) for outcome, jobs in outcomes])

    def submit_write(
        self, held: ActiveJob, status: JobStatus | None
    ) -> asyncio.Future[None] | None:
        """Queue one job's committed write when it ended a batch child or a step: a future
        resolved once it was applied (and the job released). None otherwise: the caller
        releases the job."""
        outcome = outcome_of(held.job, status)
        if outcome is None:
            return None
        applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._add([(outcome, [held], applied)])
        return applied

    def _add(
        self, entries: list[tuple[Outcome, Sequence[ActiveJob], asyncio.Future[None] | None]]
    ) -> None:
        if not entries:
            return
        self._waiting.extend(entries)
        # A failure goes at once (it may abort a batch), and so does a step's end: the steps
        # waiting on it should not wait for a linger too; and everything once the worker has
        # nothing else claimed or running (no more outcomes are on their way: a batch's last
        # children should not wait to end it). Ends that come while a call runs still go
        # together in the next one.
        if (
            len(self._waiting) >= self.max_outcomes
            or self.holdings.in_flight() == 0
            or any(
                outcome.status is JobStatus.FAILED
                or (isinstance(outcome, Ended) and outcome.in_workflow)
                for outcome, _, _ in entries
            )
        ):
            self._go.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="batch_hook")

    async def _run(self) -> None:
        while self._waiting:
            await wait_any(self._go, timeout=self.linger)
            self._go.clear()
            taken, self._waiting = self._waiting, []
            try:
                await apply_outcomes(self.backend, self.log, [outcome for outcome, _, _ in taken])
            finally:
                for _, jobs, applied in taken:
                    for held in jobs:
                        self.holdings.remove(held)
                    if applied is not None and not applied.done():
                        applied.set_result(None)

    async def close(self) -> None:
        """Apply everything queued now, without lingering."""
        while self._task is not None and not self._task.done():
            self._go.set()
            await asyncio.shield(self._task)
