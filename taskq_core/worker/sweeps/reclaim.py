"""Reclaim of expired leases: jobs whose worker stopped renewing go back to be run again
(or, past TASKQ_POISON_RECLAIMS, fail as poison)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps


@dataclass(frozen=True)
class ReclaimConfig:
    """The reclaim's knobs, read from the settings."""

    cancellation_grace: timedelta
    cleanup_grace: timedelta
    poison_reclaims: int
    # Reclaims wait this long after leadership began and after the database came back.
    settle: float

    @classmethod
    def from_settings(cls, settings: TaskqSettings) -> ReclaimConfig:
        """The configuration TASKQ_* asks for."""
        return cls(
            cancellation_grace=timedelta(seconds=settings.cancellation_grace_period),
            cleanup_grace=timedelta(seconds=settings.cleanup_grace_period),
            poison_reclaims=settings.poison_reclaims,
            settle=2 * settings.heartbeat_interval,
        )


class ReclaimExpiredLeases:
    """Takes jobs whose lease ran out from their (presumed dead) workers.

    Reclaiming waits until this worker has led, and the database has answered it, for two
    heartbeat intervals: leases that ran out while the database was away (or while nobody
    led) ran out because no worker could renew them, and the workers still holding those
    jobs renew them, or write their outcomes, within a heartbeat of the database's return.
    """

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.config = ReclaimConfig.from_settings(deps.settings)

    def allowed(self) -> bool:
        """Whether expired leases may be taken from their workers now."""
        deps = self.deps
        settled = deps.clock.monotonic() - self.config.settle
        return deps.state.leader_since <= settled and deps.database.available_since <= settled

    async def run_once(self) -> int:
        """Jobs reclaimed (0 while reclaims must still wait); counted in the meters."""
        if not self.allowed():
            return 0
        config = self.config
        reclaimed = await self.deps.backend.reclaim_expired_leases(
            config.cancellation_grace,
            config.cleanup_grace,
            poison_reclaims=config.poison_reclaims,
        )
        if reclaimed:
            self.deps.meters.reclaimed_jobs.add(reclaimed)
        return reclaimed
