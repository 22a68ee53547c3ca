"""Worker liveness, the one rule: a worker (or the leader) is alive when it was heard from
within ``stale_after``, i.e. ``now - last_seen_at <= stale_after``.

``stale_after`` follows the workers' own cadence: a worker beats every
TASKQ_HEARTBEAT_INTERVAL and isolates itself after TASKQ_MAX_HEARTBEAT_FAILURES + 1 missed
beats, so a row silent for longer belongs to a worker that is gone. ``jobs explain``,
``workers list``, ``taskq top`` and the leader's stranded-queue check all judge through here.
The workgroup supervisor's restart decision (supervisor/policy.py) is a separate rule.
A stale worker raises an alert until an operator acknowledges its silence or the
stale-worker cleanup deletes its row (``raises_stale_alert``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from taskq_core.backend.protocol import WorkerRow
from taskq_core.settings import TaskqSettings

WorkerState = Literal["running", "stale", "stopped"]


def stale_after_for(heartbeat_interval: float, max_heartbeat_failures: int) -> timedelta:
    """How long a worker beating every ``heartbeat_interval`` can stay silent and be alive."""
    return timedelta(seconds=heartbeat_interval * (max_heartbeat_failures + 1))


def worker_stale_after(settings: TaskqSettings) -> timedelta:
    """``stale_after`` for the workers these settings run."""
    return stale_after_for(settings.heartbeat_interval, settings.max_heartbeat_failures)


# The threshold at the default settings (10 s x (3 + 1) = 40 s), for readers given none.
DEFAULT_STALE_AFTER = stale_after_for(
    TaskqSettings.model_fields["heartbeat_interval"].default,
    TaskqSettings.model_fields["max_heartbeat_failures"].default,
)


def heard_from(last_seen_at: datetime, now: datetime, stale_after: timedelta) -> bool:
    """Whether a heartbeat stamped ``last_seen_at`` is recent enough at ``now``."""
    return now - last_seen_at <= stale_after


def worker_state(worker: WorkerRow, now: datetime, stale_after: timedelta) -> WorkerState:
    """``stopped`` once marked so; ``stale`` when its heartbeat is older than a live worker's
    can be; otherwise ``running``."""
    if worker.status != "running":
        return "stopped"
    if not heard_from(worker.last_seen_at, now, stale_after):
        return "stale"
    return "running"


def silence_acknowledged(worker: WorkerRow) -> bool:
    """Whether an operator acknowledged the worker's current silence: an acknowledgement
    covers the silence it saw, so it lapses once the worker is heard from after it."""
    return worker.acknowledged_at is not None and worker.last_seen_at <= worker.acknowledged_at


def raises_stale_alert(worker: WorkerRow, now: datetime, stale_after: timedelta) -> bool:
    """A stale worker whose silence no operator has acknowledged: what the dashboards warn
    of. A stopped worker (the supervisor saw its process end) raises none, nor does a row
    the stale-worker cleanup has deleted."""
    return worker_state(worker, now, stale_after) == "stale" and not silence_acknowledged(worker)


def worker_is_alive(worker: WorkerRow, now: datetime, stale_after: timedelta) -> bool:
    """Registered as running and heard from within ``stale_after``."""
    return worker_state(worker, now, stale_after) == "running"
