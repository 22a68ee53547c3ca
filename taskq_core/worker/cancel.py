"""CancelController: the three-phase cancel protocol for this worker's running jobs.

State model, per job (driven by the heartbeat loop):

    NONE --(db cancel_phase >= 1 observed)--> COOPERATIVE: ctx.cancel_event is set
    COOPERATIVE --(cancellation_grace_period)--> FORCED: cancel_phase=2 is written to the
        database FIRST, then task.cancel() runs with no await in between
    FORCED --(+ cleanup_grace_period)--> ABANDON_PENDING (in-process only): the job id is
        queued, and ``run_post_tx`` writes ``abandoned`` after the heartbeat transaction

If the database already says FORCED (another controller escalated), the job fast-advances
without a write. The consumer skips its own terminal write for ABANDON_PENDING jobs.
"""

from __future__ import annotations

from collections import deque
from uuid import UUID

from taskq_core.backend.protocol import CancelFlag
from taskq_core.worker.active import ActiveJob, CancelPhase
from taskq_core.worker.deps import WorkerDeps


class CancelController:
    """Advances cancel phases of running jobs; owns the abandoned terminal write."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self._pending_abandons: deque[UUID] = deque()

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
            active = self.deps.active.get(flag.job_id)
            if active is None:
                continue
            if active.cancel_phase == CancelPhase.NONE and flag.cancel_phase >= 1:
                self.begin(active, now, reason="requested")
            if flag.cancel_phase >= 2 and active.cancel_phase < CancelPhase.FORCED:
                active.cancel_phase = CancelPhase.FORCED
                if active.task is not None:
                    active.task.cancel()

    def begin(self, active: ActiveJob, now: float, *, reason: str) -> None:
        """Enter COOPERATIVE: signal the actor through its cancel_event."""
        if active.cancel_phase != CancelPhase.NONE:
            return
        active.cancel_reason = reason
        active.cancel_phase = CancelPhase.COOPERATIVE
        active.cancel_observed_at = now
        active.ctx.signal_cancel()
        self.deps.log.info("job_cancel_observed", job_id=str(active.job.id), reason=reason)

    async def advance(self) -> None:
        """Escalate jobs whose grace ran out; queue those past the cleanup grace."""
        now = self.deps.clock.monotonic()
        for active in self.deps.active.all():
            if active.cancel_observed_at is None or active.cancel_reason != "requested":
                continue
            elapsed = now - active.cancel_observed_at
            if active.cancel_phase == CancelPhase.COOPERATIVE and elapsed >= self.grace:
                await self.deps.backend.write_cancel_escalation(active.job.id, self.deps.worker_id)
                active.cancel_phase = CancelPhase.FORCED
                if active.task is not None:  # no await since the write: see module docstring
                    active.task.cancel()
                self.deps.log.warning("job_cancel_forced", job_id=str(active.job.id))
            elif active.cancel_phase == CancelPhase.FORCED and elapsed >= self.grace + self.cleanup:
                active.cancel_phase = CancelPhase.ABANDON_PENDING
                self._pending_abandons.append(active.job.id)

    async def run_post_tx(self) -> None:
        """Write ``abandoned`` for queued jobs (after, never inside, the heartbeat transaction)."""
        while self._pending_abandons:
            job_id = self._pending_abandons.popleft()
            if await self.deps.backend.mark_abandoned(job_id):
                self.deps.log.error("job_abandoned", job_id=str(job_id))
            active = self.deps.active.get(job_id)
            if active is not None:
                active.abandon()  # releases the consumer still waiting on the task
            self.deps.active.remove(job_id)

    def next_deadline(self) -> float | None:
        """Monotonic time of the earliest pending escalation, if any."""
        deadlines = []
        for active in self.deps.active.all():
            if active.cancel_observed_at is None or active.cancel_reason != "requested":
                continue
            if active.cancel_phase == CancelPhase.COOPERATIVE:
                deadlines.append(active.cancel_observed_at + self.grace)
            elif active.cancel_phase == CancelPhase.FORCED:
                deadlines.append(active.cancel_observed_at + self.grace + self.cleanup)
        return min(deadlines) if deadlines else None
