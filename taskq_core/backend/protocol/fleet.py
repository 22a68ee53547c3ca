"""What the fleet metrics need of a backend: the queue-level picture in one consistent read.

``get_fleet_stats`` is read once for the whole fleet (a Prometheus scrape target, not each
worker): per queue and per (queue, actor), the waiting and running jobs, the oldest pending
job, the jobs finished within a window and how long the jobs that started within it waited.
Everything is on the backend's clock, at one instant (``FleetStats.now``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from taskq_core.statemachine import JobStatus

# The start-latency percentiles every backend reports, as fractions.
LATENCY_PERCENTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class StartLatency:
    """How long the jobs that started within the window waited, from due to start.

    A job's wait is ``started_at - scheduled_at`` of its latest attempt (never below 0):
    ``scheduled_at`` is when it became due (its enqueue, the end of its delay, snooze or
    retry backoff), so an intended delay is not counted as waiting. ``started`` jobs were
    measured; ``percentiles`` maps each of LATENCY_PERCENTILES to its value (interpolated as
    ``percentile_of`` does), every value in seconds.
    """

    started: int
    mean: float
    percentiles: dict[float, float]
    longest: float


@dataclass(frozen=True, slots=True)
class ActorFleetStats:
    """One actor of one queue: ``pending``, ``running`` (bodies running) and ``claimed``
    (running in the database, not started yet) exactly; ``finished``: its jobs per terminal
    status finished within the window (only statuses with jobs); ``latency``: None when none
    of its jobs started within the window."""

    queue: str
    actor: str
    pending: int = 0
    running: int = 0
    claimed: int = 0
    finished: dict[JobStatus, int] = field(default_factory=dict)
    latency: StartLatency | None = None


@dataclass(frozen=True, slots=True)
class QueueFleetStats:
    """One queue: the sums of its actors, plus what only the queue has.

    ``scheduled`` counts its jobs waiting for a time (delay, backoff); ``oldest_pending_at``
    is the ``scheduled_at`` of the pending job that has been due longest (None when nothing
    is pending). ``latency`` is over all its jobs (not an average of its actors').
    ``actors`` lists the actors with jobs waiting, running or finished within the window.
    """

    name: str
    paused: bool = False
    pending: int = 0
    scheduled: int = 0
    running: int = 0
    claimed: int = 0
    oldest_pending_at: datetime | None = None
    finished: dict[JobStatus, int] = field(default_factory=dict)
    latency: StartLatency | None = None
    actors: list[ActorFleetStats] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FleetStats:
    """Every queue that has jobs or a row in ``queues``, by name, read at ``now``."""

    now: datetime
    window: timedelta
    queues: list[QueueFleetStats]


def check_fleet_window(window: timedelta) -> None:
    """Validate ``get_fleet_stats``'s window the same way in every implementation."""
    if window <= timedelta(0):
        raise ValueError(f"window must be positive, got {window}")


def percentile_of(ordered: Sequence[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``ordered`` (ascending, not empty), interpolated
    linearly between the two nearest values, as PostgreSQL's ``percentile_cont``."""
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def start_latency(waits: Sequence[float]) -> StartLatency | None:
    """The StartLatency of these waits (seconds), None when there are none."""
    if not waits:
        return None
    ordered = sorted(waits)
    return StartLatency(
        started=len(ordered),
        mean=sum(ordered) / len(ordered),
        percentiles={p: percentile_of(ordered, p) for p in LATENCY_PERCENTILES},
        longest=ordered[-1],
    )


@runtime_checkable
class FleetBackend(Protocol):
    """The fleet's queue-level picture, read once for every worker."""

    async def get_fleet_stats(self, window: timedelta) -> FleetStats:
        """Per queue and per (queue, actor): exact pending, scheduled (queue), running and
        claimed counts, the oldest pending job, jobs finished within ``window`` by status,
        and the start latency of the jobs that started within it (see StartLatency).

        All of it from one snapshot at one instant (``now``). PG: every read of ``jobs``
        walks an index; the finished rows of the window are fetched from the heap, so the
        cost grows with the jobs finished within ``window`` (and not with the table).
        ``window`` must be positive (ValueError).
        """
