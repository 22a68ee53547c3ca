"""Stalls: the process or its event loop did not run for longer than a heartbeat interval.

A SIGSTOP, a VM pause, a suspended host or a callback that blocks the loop all look the same
from inside: time moved on while nothing here ran. Meanwhile leases ran out, the leader may
have reclaimed this worker's jobs and another worker may be running them. So when a stall
ends, before anything else runs:

- every claimed or running holding whose lease deadline passed (``LeaseTerms``) is lost at
  once: its body is cancelled, nothing is written for it (whoever holds the lease now settles
  the job), and no body starts on it; holdings whose outcome is being written keep going,
  since those writes are fenced and land only if the lease is still this worker's;
- a leadership whose lease ran out is dropped before any sweep runs;
- the watchdogs give every loop a fresh budget (a stop is not a hang).

Detection: ``StallSensor`` wraps the event loop's selector (``run_worker`` builds the loop
with it), so a stall is seen as the loop wakes, before it runs any callback: the time spent
outside ``select`` (callbacks) or past the timeout it asked ``select`` for. Time is
CLOCK_BOOTTIME where the platform has it, which keeps counting while a host is suspended.
A worker on a loop it did not build (an application's own) has the heartbeat's check
instead: a heartbeat that wakes a whole interval late reports the stall
(``StallGuard.check_wake``).
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable
from typing import Any

from taskq_core.obs.metrics import labels
from taskq_core.worker.active import Stage
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import drop_lapsed_leadership

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def boot_time() -> float:
    """Seconds on a clock that also counts while the host is suspended (monotonic else)."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


class StallSensor:
    """Measures, around each ``select`` of the event loop, how long the loop did not run.

    Until ``watch`` arms it, it only measures. ``on_stall`` is called with the stall's length
    from inside ``select``, before the loop handles the events and timers that are due; it
    must not raise (a failure is swallowed: a sensor must never take the loop down).
    """

    def __init__(self, clock: Callable[[], float] = boot_time) -> None:
        self.clock = clock
        self.threshold = float("inf")
        self.on_stall: Callable[[float], None] | None = None
        self._returned_at: float | None = None
        self._entered_at = 0.0

    def watch(self, threshold: float, on_stall: Callable[[float], None]) -> None:
        """Report stalls longer than ``threshold`` seconds to ``on_stall``."""
        self.threshold = threshold
        self.on_stall = on_stall

    def before_select(self) -> None:
        """The loop is about to wait for events."""
        self._entered_at = self.clock()

    def after_select(self, timeout: float | None) -> float:
        """The wait ended; returns how long the loop did not run (0 when on time)."""
        now = self.clock()
        busy = 0.0 if self._returned_at is None else self._entered_at - self._returned_at
        waited = now - self._entered_at
        overslept = 0.0 if timeout is None else waited - timeout
        self._returned_at = now
        stalled = max(busy, overslept)
        if stalled > self.threshold and self.on_stall is not None:
            try:
                self.on_stall(stalled)
            except Exception:
                pass
        return stalled

    def selector(self) -> selectors.BaseSelector:
        """A selector for ``asyncio.SelectorEventLoop`` that reports to this sensor."""
        return _SensingSelector(self)


class _SensingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, sensor: StallSensor) -> None:
        super().__init__()
        self._sensor = sensor

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        self._sensor.before_select()
        ready = super().select(timeout)
        self._sensor.after_select(timeout)
        return ready  # type: ignore[no-any-return]


class StallGuard:
    """What the worker does when a stall ends (see the module docstring)."""

    def __init__(self, deps: WorkerDeps, controller: CancelController) -> None:
        self.deps = deps
        self.controller = controller
        self.threshold = deps.settings.heartbeat_interval
        self.handled_at = float("-inf")  # monotonic time the last stall was handled

    def stalled(self, seconds: float) -> None:
        """A stall of ``seconds`` just ended: lose what may be gone, step down if need be."""
        deps = self.deps
        now = deps.clock.monotonic()
        self.handled_at = now
        lost = [
            held
            for held in deps.active.leases()
            if held.stage is not Stage.SETTLING and deps.active.expired(held, now)
        ]
        for held in lost:
            self.controller.lose(held, "stalled")
        drop_lapsed_leadership(deps)
        deps.liveness.restart()
        deps.meters.stalls.add(1, labels())
        deps.log.warning(
            "worker_stalled",
            seconds=round(seconds, 3),
            jobs_lost=len(lost),
            note="the process or its event loop did not run; jobs whose leases may have "
            "run out meanwhile were given up here, unwritten",
        )

    def check_wake(self, expected: float, now: float) -> None:
        """The heartbeat woke at ``now``, due at ``expected`` (monotonic): a wake a whole
        heartbeat interval late is a stall the loop's sensor did not report (a loop built
        without it), unless one was handled since."""
        late = now - expected
        if late > self.threshold and self.handled_at < expected:
            self.stalled(late)
