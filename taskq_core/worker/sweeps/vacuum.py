"""Jobs vacuum: the jobs table is vacuumed when dead rows pile up faster than autovacuum
clears them (TASKQ_JOBS_VACUUM_ENABLED)."""

from __future__ import annotations

from taskq_core.constants import (
    JOBS_VACUUM_DEAD_FRACTION,
    JOBS_VACUUM_MIN_DEAD,
    JOBS_VACUUM_TIMEOUT,
)
from taskq_core.worker.deps import WorkerDeps


class JobsVacuum:
    """Vacuums the jobs table past JOBS_VACUUM_MIN_DEAD dead rows and JOBS_VACUUM_DEAD_FRACTION:
    the dispatch index stays short, and a long drain keeps its rate."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "jobs_vacuum") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it

    async def run_once(self) -> bool:
        """Whether it vacuumed (logged with how long it took)."""
        deps = self.deps
        # A vacuum of a big table runs for a while: say so before the watchdog wonders.
        deps.liveness.tick(self.beat, period=JOBS_VACUUM_TIMEOUT)
        started = deps.clock.monotonic()
        vacuumed = await deps.backend.vacuum_jobs(JOBS_VACUUM_MIN_DEAD, JOBS_VACUUM_DEAD_FRACTION)
        if vacuumed:
            deps.log.info("jobs_vacuumed", seconds=round(deps.clock.monotonic() - started, 3))
        return vacuumed
