"""CancelController: the three-phase cancel protocol for this worker's running jobs, and the
local end of a lost lease.

State model, per job (driven by the heartbeat loop):

    NONE --(db cancel_phase >= 1 observed)--> COOPERATIVE: ctx.cancel_event is set
    COOPERATIVE --(cancellation_grace_period)--> FORCED: cancel_phase=2 is written to the
        database FIRST, then task.cancel() runs with no await in between
    FORCED --(+ cleanup_grace_period)--> ABANDON_PENDING (in-process only): the job is
        queued, and ``run_post_tx`` writes ``abandoned`` after the heartbeat transaction

If the database already says FORCED (another controller escalated), the job fast-advances
without a write. The consumer skips its own terminal write for ABANDON_PENDING jobs.

``lose`` ends the worker's part in a job whose lease is gone (refused by the heartbeat,
given up after lost heartbeats, or past its deadline after a stall): a claimed job is
dropped, a running one cancelled at once, and nothing is written for either; whoever holds
the lease now settles the job.

An abandon after a shutdown's forced cancel is not the end of the job: the attempt is
abandoned and the job goes back to the queue under its retry policy (``mark_abandoned``
answers where it went); an operator's cancel ends it abandoned.
"""

from __future__ import annotations

from collections import deque

from taskq_core.backend.protocol import CancelFlag
from taskq_core.obs.metrics import labels
from taskq_core.worker.active import ActiveJob, CancelPhase, Stage
from taskq_core.worker.batch_hook import is_hooked
from taskq_core.worker.deps import WorkerDeps

THREAD_ABANDONED = (
    "the actor runs in a thread, which a forced cancel cannot stop: it did not return within "
    "TASKQ_CLEANUP_GRACE_PERIOD and may still be running"
)
TASK_ABANDONED = "the actor ignored its forced cancel and did not stop within the cleanup grace"


def count_transition(deps: WorkerDeps, held: ActiveJob, phase: CancelPhase) -> None:
    """One cancel phase change, in ``taskq.cancellation.phase_transitions``."""
    attributes = labels(**{"taskq.cancel.phase": phase.name.lower(),
                           "taskq.cancel.reason": held.cancel_reason})  # fmt: skip
    deps.meters.cancellation_phase_transitions.add(1, attributes)


def lose(deps: WorkerDeps, held: ActiveJob, reason: str) -> None:
    """The lease of ``held`` is gone: stop it locally and write nothing for it."""
    if held.lost is not None:
        return
    held.lost = reason
    deps.meters.leases_lost.add(1, labels(**{"taskq.lease.reason": reason}))
    deps.log.warning(
        "job_lease_lost",
        job_id=str(held.job.id),
        attempt=held.lease.attempt,
        stage=held.stage.value,
        reason=reason,
    )
    if held.stage is Stage.CLAIMED:
        deps.active.remove(held)  # its consumer skips it when it comes up
    elif held.stage is Stage.RUNNING:
        held.cancel_reason = "lease_lost"
        if held.ctx is not None:
            held.ctx.signal_cancel()
        if held.task is not None:
            held.task.cancel()


def abandon_reason(held: ActiveJob) -> str:
    """Why a job is written off as abandoned, as ``jobs show`` prints it."""
    return THREAD_ABANDONED if held.in_thread else TASK_ABANDONED


class CancelController:
    """Advances cancel phases of running jobs; owns the abandoned terminal write."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self._pending_abandons: deque[ActiveJob] = deque()

    @property
    def grace(self) -> float:
        """Seconds a job has to exit cooperatively."""
        return self.deps.settings.cancellation_grace_period

    @property
    def cleanup(self) -> float:
        """Seconds a force-cancelled job has to unwind."""
        return self.deps.settings.cleanup_grace_period

    def observe(self, flags: list[CancelFlag]) -> None:
        """Apply cancel flags read from the database to the matching running jobs."""
        now = self.deps.clock.monotonic()
        for flag in flags:
            held = self.deps.active.get(flag.job_id)
            if held is None or held.stage is not Stage.RUNNING or held.lost is not None:
                continue
            if held.cancel_phase == CancelPhase.NONE and flag.cancel_phase >= 1:
                self.begin(held, now, reason="requested")
            if flag.cancel_phase >= 2 and held.cancel_phase < CancelPhase.FORCED:
                held.cancel_phase = CancelPhase.FORCED
                count_transition(self.deps, held, CancelPhase.FORCED)
                if held.task is not None:
                    held.task.cancel()

    def begin(self, held: ActiveJob, now: float, *, reason: str) -> None:
        """Enter COOPERATIVE: signal the actor through its cancel_event."""
        if held.cancel_phase != CancelPhase.NONE:
            return
        held.cancel_reason = reason
        held.cancel_phase = CancelPhase.COOPERATIVE
        held.cancel_observed_at = now
        if held.ctx is not None:
            held.ctx.signal_cancel()
        self.deps.log.info("job_cancel_observed", job_id=str(held.job.id), reason=reason)
        count_transition(self.deps, held, CancelPhase.COOPERATIVE)

    def lose(self, held: ActiveJob, reason: str) -> None:
        """The lease of ``held`` is gone: stop it locally and write nothing for it."""
        lose(self.deps, held, reason)

    async def advance(self) -> None:
        """Escalate jobs whose grace ran out; queue those past the cleanup grace."""
        now = self.deps.clock.monotonic()
        for held in self.deps.active.running():
            if held.cancel_observed_at is None or held.cancel_reason != "requested":
                continue
            elapsed = now - held.cancel_observed_at
            if held.cancel_phase == CancelPhase.COOPERATIVE and elapsed >= self.grace:
                await self.deps.backend.write_cancel_escalation(held.lease)
                held.cancel_phase = CancelPhase.FORCED
                if held.task is not None:  # no await since the write: see module docstring
                    held.task.cancel()
                self.deps.log.warning("job_cancel_forced", job_id=str(held.job.id))
                count_transition(self.deps, held, CancelPhase.FORCED)
            elif held.cancel_phase == CancelPhase.FORCED and elapsed >= self.grace + self.cleanup:
                held.cancel_phase = CancelPhase.ABANDON_PENDING
                self._pending_abandons.append(held)
                count_transition(self.deps, held, CancelPhase.ABANDON_PENDING)

    async def run_post_tx(self) -> None:
        """Write ``abandoned`` for queued jobs (after, never inside, the heartbeat transaction)."""
        while self._pending_abandons:
            held = self._pending_abandons[0]
            await write_abandoned(self.deps, held)
            self._pending_abandons.popleft()

    def next_deadline(self) -> float | None:
        """Monotonic time of the earliest pending escalation, if any."""
        deadlines = []
        for held in self.deps.active.running():
            if held.cancel_observed_at is None or held.cancel_reason != "requested":
                continue
            if held.cancel_phase == CancelPhase.COOPERATIVE:
                deadlines.append(held.cancel_observed_at + self.grace)
            elif held.cancel_phase == CancelPhase.FORCED:
                deadlines.append(held.cancel_observed_at + self.grace + self.cleanup)
        return min(deadlines) if deadlines else None


async def write_abandoned(deps: WorkerDeps, held: ActiveJob) -> None:
    """Write an attempt off as abandoned (it ignored even its forced cancel) and release the
    consumer still waiting on it. Raises on a transient error, before releasing anything."""
    reason = abandon_reason(held)
    hooked = False
    status = await deps.backend.mark_abandoned(held.lease, reason)
    if status is not None:
        deps.log.error(
            "job_abandoned",
            job_id=str(held.job.id),
            attempt=held.lease.attempt,
            reason=reason,
            status=status.value,  # pending: back in the queue (a shutdown's, retries left)
        )
        if is_hooked(held.job.metadata):  # a batch child or a step: the hook releases it
            hooked = deps.completer.hooks.submit_write(held, status) is not None
    held.cancel_phase = CancelPhase.ABANDON_PENDING
    held.abandon()  # releases the consumer still waiting on the task
    if not hooked:
        deps.active.remove(held)
