"""The leader's maintenance passes, each a small class with ``run_once`` returning a result.

Every predicate runs on the database clock inside the backend; these classes only decide
*when* to ask. Tests call ``run_once`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from taskq_core.liveness import worker_is_alive
from taskq_core.statemachine import JobStatus
from taskq_core.worker.deps import WorkerDeps


@dataclass(frozen=True)
class SweepResult:
    """What one maintenance sweep changed."""

    reclaimed: int
    deadline_failed: int
    results_expired: int


class ScheduledPromotion:
    """Sweep 3: scheduled jobs that are due become pending (the backend NOTIFYs)."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """Promote due jobs; returns how many."""
        return await self.deps.backend.scheduled_to_pending()


class MaintenanceSweep:
    """Sweeps 1 and 2 plus result expiry: reclaim expired locks, fail missed deadlines.

    Reclaiming waits until this worker has led, and the database has answered it, for two
    heartbeat intervals: leases that ran out while the database was away (or while nobody
    led) ran out because no worker could renew them, and the workers still holding those
    jobs renew them, or write their outcomes, within a heartbeat of the database's return.
    """

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    def reclaim_allowed(self) -> bool:
        """Whether expired leases may be taken from their workers now."""
        deps = self.deps
        settled = deps.clock.monotonic() - 2 * deps.settings.heartbeat_interval
        return deps.leader_since <= settled and deps.database.available_since <= settled

    async def run_once(self) -> SweepResult:
        """One pass of every sweep."""
        settings, backend = self.deps.settings, self.deps.backend
        reclaimed = 0
        if self.reclaim_allowed():
            reclaimed = await backend.reclaim_expired_locks(
                timedelta(seconds=settings.cancellation_grace_period),
                timedelta(seconds=settings.cleanup_grace_period),
            )
        failed = await backend.deadline_sweep()
        expired = await backend.expire_results()
        result = SweepResult(reclaimed, failed, expired)
        if reclaimed or failed:
            self.deps.log.info(
                "sweep_ran", reclaimed=reclaimed, deadline_failed=failed, results_expired=expired
            )
        return result


class StrandedQueues:
    """Warns about queues with waiting jobs that no live worker consumes."""

    def __init__(self, deps: WorkerDeps, *, stale_after: timedelta) -> None:
        self.deps = deps
        self.stale_after = stale_after  # liveness.worker_stale_after: explain's and top's too

    async def run_once(self) -> list[str]:
        """Names of stranded queues (also logged)."""
        backend = self.deps.backend
        waiting = {
            c.queue
            for c in await backend.count_by_queue_status()
            if c.status in (JobStatus.PENDING, JobStatus.SCHEDULED) and c.count > 0
        }
        if not waiting:
            return []
        now = self.deps.clock.now()
        consumed: set[str] = set()
        for worker in await backend.list_workers():
            if worker_is_alive(worker, now, self.stale_after):
                consumed.update(worker.queues)
        stranded = sorted(waiting - consumed)
        if stranded:
            self.deps.log.warning(
                "stranded_queues",
                queues=stranded,
                note="jobs wait in queues no live worker consumes",
            )
        return stranded
