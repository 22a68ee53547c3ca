"""Scheduled promotion: scheduled jobs that are due become pending (the backend NOTIFYs)."""

from __future__ import annotations

from taskq_core.worker.deps import WorkerDeps


class ScheduledPromotion:
    """Promotes due scheduled jobs, every TASKQ_SCHEDULED_WAKE_INTERVAL."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """Promote due jobs; returns how many."""
        promoted = await self.deps.backend.promote_scheduled_jobs()
        if promoted:
            self.deps.meters.scheduled_promoted.add(promoted)
        return promoted
