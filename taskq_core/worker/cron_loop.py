"""The leader's cron loop: fires the due schedules, one job per fire time.

Only the leader runs it (``leader_services.py``: every CRON_TICK_INTERVAL seconds). Each tick
calls ``fire_due_schedules`` (one transaction of at most CRON_TICK_LIMIT schedules, on the
database's clock) again at once while a batch came back full, so a backlog after downtime
drains without waiting a tick per batch. Exactly-once does not rest on leadership: two
leaders for a moment (one that lost its lock and has not noticed yet) skip each other's
locked rows, and the fire time in each job's unique key refuses a second job for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq_core.backend.protocol import FiredSchedule
from taskq_core.constants import CRON_TICK_LIMIT
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import still_leading
from taskq_core.worker.sweeps.progress import batch_beat


@dataclass(frozen=True)
class CronTickResult:
    """What one tick fired: every schedule of its batches, in order."""

    fired: list[FiredSchedule]

    @property
    def jobs(self) -> int:
        """Jobs this tick created (a fire time whose job existed made none)."""
        return sum(1 for fire in self.fired if fire.job_id is not None)


class CronLoop:
    """Fires due cron schedules; ``run_once`` is one tick, the leader's loop repeats it."""

    def __init__(
        self, deps: WorkerDeps, *, limit: int = CRON_TICK_LIMIT, beat: str = "cron"
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.deps = deps
        self.limit = limit
        self.beat = beat  # the liveness name each committed batch ticks

    async def run_once(self) -> CronTickResult:
        """Fire batches until one comes back short (nothing more is due), or this worker
        stops leading (its lease lapsed included) or begins to shut down; log each fire."""
        deps = self.deps
        committed = batch_beat(deps, self.beat)
        fired: list[FiredSchedule] = []
        while True:
            batch = await deps.backend.fire_due_schedules(self.limit)
            committed(len(batch))
            for fire in batch:
                self._log(fire)
            fired.extend(batch)
            if len(batch) < self.limit:
                break
            if not still_leading(deps) or deps.state.shutdown_event.is_set():
                break
        return CronTickResult(fired)

    def _log(self, fire: FiredSchedule) -> None:
        log = self.deps.log
        fire_time = fire.fire_at.isoformat()
        if fire.job_id is None:
            # Another leader's tick made this fire time's job: nothing for an operator to do.
            log.debug("schedule_fire_time_taken", schedule=fire.name, fire_time=fire_time)
            return
        log.info(
            "schedule_fired",
            schedule=fire.name,
            fire_time=fire_time,
            job_id=str(fire.job_id),
            next_fire=fire.next_fire_at.isoformat(),
        )
        if fire.missed_since is not None:
            log.info(
                "schedule_caught_up",
                schedule=fire.name,
                fire_time=fire_time,
                missed_since=fire.missed_since.isoformat(),
                note="fire times passed while no leader ran; one job stands for them",
            )
