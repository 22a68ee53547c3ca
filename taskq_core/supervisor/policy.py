"""The workgroup supervisor's decisions as pure functions: restart backoff, burst limit, staleness.

Nothing here touches a process, a clock or a database. Callers pass monotonic seconds and
what they observed; each function returns a decision and the updated (immutable) history, so
the unit tests replay any sequence of exits and heartbeats without spawning anything.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from taskq_core.constants import (
    EXIT_ERROR,
    EXIT_IDLE_FAILURES,
    EXIT_IDLE_MAX_RUNTIME,
    EXIT_OK,
    EXIT_WATCHDOG,
)

# Exit codes after which an until-idle child is done rather than crashed: drained (0), drained
# with failed jobs (3), or out of time (4). Anything else (1, the watchdog's 2, a signal) is a
# crash and is restarted like in a long-running group, so the batch still finishes.
UNTIL_IDLE_FINAL_CODES = frozenset({EXIT_OK, EXIT_IDLE_FAILURES, EXIT_IDLE_MAX_RUNTIME})


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How the supervisor restarts a child that exited, and when it gives its spec up.

    The n-th restart in a row of a child that keeps dying young waits
    ``backoff_initial * backoff_factor ** (n - 1)`` seconds, capped at ``backoff_max``; a run
    that lasted ``backoff_reset_after`` seconds starts the sequence over. The child's spec is
    given up when one child exits more than ``burst_limit`` times within ``burst_window``
    seconds, or more than ``burst_limit`` times in a row after runs shorter than
    ``backoff_reset_after`` (the backoff would otherwise spread a crash loop thinner than any
    window, and it would never be given up).
    """

    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    backoff_factor: float = 2.0
    backoff_reset_after: float = 30.0
    burst_limit: int = 5
    burst_window: float = 60.0

    def __post_init__(self) -> None:
        if self.backoff_initial <= 0 or self.backoff_max < self.backoff_initial:
            raise ValueError("need 0 < backoff_initial <= backoff_max")
        if self.backoff_factor < 1:
            raise ValueError("backoff_factor must be >= 1")
        if self.backoff_reset_after <= 0 or self.burst_window <= 0:
            raise ValueError("backoff_reset_after and burst_window must be > 0")
        if self.burst_limit < 0:
            raise ValueError("burst_limit must be >= 0")


@dataclass(frozen=True, slots=True)
class RestartHistory:
    """One child slot's recent exits: what the next restart decision depends on."""

    exits: tuple[float, ...] = ()  # monotonic times of exits still inside the burst window
    backoff_steps: int = 0  # exponent of the next delay: restarts since the last long run
    young_in_a_row: int = 0  # consecutive exits after runs shorter than backoff_reset_after


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """Restart after ``delay`` seconds, or give the spec up; plus the history to keep."""

    give_up: bool
    delay: float
    exits_in_window: int
    young_in_a_row: int
    history: RestartHistory


def decide_restart(
    policy: RestartPolicy, history: RestartHistory, *, now: float, uptime: float
) -> RestartDecision:
    """Decide what follows an unplanned exit at ``now`` of a child that ran ``uptime`` seconds."""
    exits = (*(t for t in history.exits if now - t < policy.burst_window), now)
    young = uptime < policy.backoff_reset_after
    steps = history.backoff_steps if young else 0
    young_in_a_row = history.young_in_a_row + 1 if young else 0
    delay = min(policy.backoff_max, policy.backoff_initial * policy.backoff_factor**steps)
    return RestartDecision(
        give_up=len(exits) > policy.burst_limit or young_in_a_row > policy.burst_limit,
        delay=delay,
        exits_in_window=len(exits),
        young_in_a_row=young_in_a_row,
        history=RestartHistory(exits=exits, backoff_steps=steps + 1, young_in_a_row=young_in_a_row),
    )


@dataclass(frozen=True, slots=True)
class HeartbeatWatch:
    """The last ``workers.last_seen_at`` seen for one child, and when it last moved.

    Staleness is judged by whether the database timestamp *moves*, timed on the supervisor's
    monotonic clock: clock skew between this host and the database can never get a healthy
    child killed. Until the child's row first appears, ``moved_at`` is its spawn time.
    """

    last_seen_at: datetime | None
    moved_at: float

    @classmethod
    def spawned(cls, now: float) -> HeartbeatWatch:
        """The watch of a child spawned at ``now`` that has not registered yet."""
        return cls(last_seen_at=None, moved_at=now)


def observe_heartbeat(
    watch: HeartbeatWatch, last_seen_at: datetime | None, *, now: float
) -> HeartbeatWatch:
    """Fold one observation of the child's row (None: no row yet) into its watch."""
    if last_seen_at is not None and last_seen_at != watch.last_seen_at:
        return HeartbeatWatch(last_seen_at=last_seen_at, moved_at=now)
    return watch


def observation_failed(watch: HeartbeatWatch, *, now: float) -> HeartbeatWatch:
    """The database could not be asked: restart the clock rather than blame the child.

    Workers cannot heartbeat through an outage either; without this, every child would look
    stale the moment the database came back.
    """
    return replace(watch, moved_at=max(watch.moved_at, now))


def is_stale(
    watch: HeartbeatWatch, *, now: float, stale_after: float, start_timeout: float
) -> bool:
    """True when the child's heartbeat has not moved for too long.

    A registered child gets ``stale_after`` seconds; one that has not registered its row yet
    gets ``start_timeout`` seconds from its spawn.
    """
    limit = start_timeout if watch.last_seen_at is None else stale_after
    return now - watch.moved_at > limit


def is_final_exit(code: int, *, until_idle: bool) -> bool:
    """Whether an exit ends the child for good (until-idle only) rather than asks for a restart."""
    return until_idle and code in UNTIL_IDLE_FINAL_CODES


def group_exit_code(codes: Iterable[int]) -> int:
    """The until-idle group's exit code from its children's final codes.

    0 when every child exited 0; 3 when any child reported failed jobs; otherwise the first
    other non-zero code (a death by signal, reported as a negative code, counts as 1).
    """
    normalized = [code if code >= 0 else EXIT_ERROR for code in codes]
    if all(code == EXIT_OK for code in normalized):
        return EXIT_OK
    if EXIT_IDLE_FAILURES in normalized:
        return EXIT_IDLE_FAILURES
    return next(code for code in normalized if code != EXIT_OK)


_EXIT_OUTCOMES = {
    EXIT_OK: "clean",
    EXIT_ERROR: "error",
    EXIT_WATCHDOG: "watchdog_trip",
    EXIT_IDLE_FAILURES: "jobs_failed",
    EXIT_IDLE_MAX_RUNTIME: "idle_max_runtime",
}


def describe_exit(code: int) -> str:
    """What a worker's exit code means, as a stable word for logs (``killed`` for signals)."""
    if code < 0:
        return "killed"
    return _EXIT_OUTCOMES.get(code, "error")


def exit_signal(code: int | None) -> str | None:
    """The name of the signal that killed a child (``SIGKILL``), or None for a plain exit."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
