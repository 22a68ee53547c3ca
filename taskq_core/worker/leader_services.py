"""The leader's services, declared once: which loops only the leader runs, how often, and
when they are switched on.

Each entry names a loop (its task, its liveness beat and its ``loop`` metric label), the
class whose ``run_once`` is one pass, and its cadence: an interval (``leader.run_gated``) or
a schedule's fire times (``leader.run_scheduled``), read from the settings here and nowhere
else. Every loop has its own failure handling: a transient database error retries with
backoff, an unexpected one is logged and counted, and five in a row end the worker. Adding
a sweep is a module in ``worker/sweeps/`` plus one line in LEADER_SERVICES.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from taskq_core.constants import (
    CRON_TICK_INTERVAL,
    JOBS_VACUUM_CHECK_INTERVAL,
    STALE_WORKER_CHECK_INTERVAL,
    STRANDED_CHECK_INTERVAL,
)
from taskq_core.cron_timing import Schedule, sweep_schedule
from taskq_core.settings import TaskqSettings
from taskq_core.worker.cron_loop import CronLoop
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import run_gated, run_scheduled
from taskq_core.worker.leader_sample import LEADER_SAMPLE_INTERVAL, LeaderSampler
from taskq_core.worker.sweeps.archive_expiry import ArchiveExpirySweep
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from taskq_core.worker.sweeps.promotion import ScheduledPromotion
from taskq_core.worker.sweeps.prune import PruneSweep
from taskq_core.worker.sweeps.stale_workers import StaleWorkerCleanup
from taskq_core.worker.sweeps.stranded_queues import StrandedQueues
from taskq_core.worker.sweeps.vacuum import JobsVacuum


class Sweep(Protocol):
    """A leader service: one pass per call."""

    def run_once(self) -> Awaitable[Any]:
        """Do one pass and return what it did."""
        ...


class PacedSweep(Sweep, Protocol):
    """A leader service that picks its own wait between passes (at most its interval),
    hearing what it needs while ``listening``."""

    def listening(self) -> AbstractAsyncContextManager[None]:
        """The block within which the loop runs."""
        ...

    def pause(self, interval: float) -> Awaitable[None]:
        """Wait before the next pass, at most ``interval`` seconds."""
        ...


def _every(seconds: float) -> Callable[[TaskqSettings], float]:
    return lambda _: seconds


def _always(_: TaskqSettings) -> bool:
    return True


@dataclass(frozen=True)
class LeaderService:
    """One leader loop: ``build`` makes its sweep, which runs every ``every(settings)``
    seconds or at the fire times of ``schedule(settings)`` while this worker leads."""

    name: str
    build: Callable[[WorkerDeps], Sweep]
    every: Callable[[TaskqSettings], float] | None = None
    schedule: Callable[[TaskqSettings], Schedule] | None = None
    enabled: Callable[[TaskqSettings], bool] = _always
    paced: bool = False  # the sweep is a PacedSweep: it picks its own waits

    def loop(self, deps: WorkerDeps) -> Callable[[], Awaitable[None]]:
        """The long-lived loop of this service for one worker."""
        sweep, settings = self.build(deps), deps.settings
        if self.schedule is not None:
            schedule = self.schedule(settings)
            # A daily schedule's wait re-reads the clock every sweep interval.
            recheck = settings.sweep_interval
            return lambda: run_scheduled(deps, self.name, schedule, sweep.run_once, recheck=recheck)
        assert self.every is not None, f"leader service {self.name} has no cadence"
        interval = self.every(settings)
        if not self.paced:
            return lambda: run_gated(deps, self.name, interval, sweep.run_once)
        paced = cast(PacedSweep, sweep)

        async def run_paced() -> None:
            async with paced.listening():
                await run_gated(deps, self.name, interval, paced.run_once, paced.pause)

        return run_paced


LEADER_SERVICES: tuple[LeaderService, ...] = (
    LeaderService(
        "scheduled_wake",
        ScheduledPromotion,
        every=lambda s: s.scheduled_wake_interval,
        paced=True,
    ),
    LeaderService("sweeps", MaintenanceSweep, every=lambda s: s.sweep_interval),
    LeaderService("stranded_queues", StrandedQueues, every=_every(STRANDED_CHECK_INTERVAL)),
    LeaderService("cron", CronLoop, every=_every(CRON_TICK_INTERVAL)),
    LeaderService("stale_workers", StaleWorkerCleanup, every=_every(STALE_WORKER_CHECK_INTERVAL)),
    LeaderService(
        "prune",
        PruneSweep,
        schedule=lambda s: sweep_schedule(s.prune_schedule_utc, s.prune_cron_expr),
    ),
    LeaderService(
        "archive_expiry",
        ArchiveExpirySweep,
        schedule=lambda s: sweep_schedule(
            s.archive_expiry_schedule_utc, s.archive_expiry_cron_expr
        ),
    ),
    LeaderService(
        "leader_sample",
        LeaderSampler,
        every=_every(LEADER_SAMPLE_INTERVAL),
        enabled=lambda s: s.otel_enabled,
    ),
    LeaderService(
        "jobs_vacuum",
        JobsVacuum,
        every=_every(JOBS_VACUUM_CHECK_INTERVAL),
        enabled=lambda s: s.jobs_vacuum_enabled,
    ),
)
