"""Stale workers: ``workers`` rows not heard from for a long while are deleted."""

from __future__ import annotations

from datetime import timedelta

from taskq_core.constants import STALE_WORKER_RETENTION
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps

# A workers row is deleted once silent for this many leases, when that is longer than
# STALE_WORKER_RETENTION (a deployment with hour-long leases).
STALE_WORKER_LEASES = 10


def stale_worker_threshold(settings: TaskqSettings) -> timedelta:
    """How long a workers row stays after its worker was last heard from.

    Far past any lease: a worker counts as gone after ``liveness.worker_stale_after`` (40 s
    at the defaults), every job it held is reclaimable one lease after its last beat, and a
    worker that misses TASKQ_MAX_HEARTBEAT_FAILURES beats gives its jobs up itself. Nothing
    about a worker silent for ten leases can still matter to a job; the row stays a day
    anyway so ``taskq workers list`` and job details still name who ran last night's jobs.
    """
    return max(STALE_WORKER_RETENTION, STALE_WORKER_LEASES * settings.lock_lease_delta)


class StaleWorkerCleanup:
    """Deletes ``workers`` rows not heard from for ``stale_worker_threshold``."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.older_than = stale_worker_threshold(deps.settings)

    async def run_once(self) -> int:
        """How many rows were deleted (logged when any)."""
        deleted = await self.deps.backend.delete_stale_workers(self.older_than)
        if deleted:
            self.deps.meters.stale_workers_deleted.add(deleted)
            self.deps.log.info(
                "stale_workers_deleted",
                deleted=deleted,
                silent_for_seconds=self.older_than.total_seconds(),
            )
        return deleted
