"""How a long sweep tells the stale-loop watchdog it is making progress."""

from __future__ import annotations

from collections.abc import Callable

from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps


def progress_period(settings: TaskqSettings) -> float:
    """The longest a running sweep goes between two progress beats (its liveness period):
    one batch is one statement, which the pool's command timeout
    (TASKQ_DISPATCHER_COMMAND_TIMEOUT) bounds; never less than the leader's sweep cadence."""
    return max(settings.sweep_interval, settings.dispatcher_command_timeout)


def batch_beat(deps: WorkerDeps, beat: str) -> Callable[[int], None]:
    """An ``on_batch`` callback that ticks loop ``beat``: a sweep of millions of rows runs for
    minutes, and each committed batch is progress, so the stale-loop watchdog never takes it
    for a hung loop."""

    def committed(rows: int) -> None:
        deps.liveness.tick(beat, period=progress_period(deps.settings))

    return committed
