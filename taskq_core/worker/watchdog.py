"""The in-worker watchdog: four detectors that turn a hang into a restart.

1. ShutdownWatchdog (outside the TaskGroup): shutdown still running after
   TASKQ_TERMINATION_GRACE_PERIOD, counted from the first shutdown signal.
2. Stale loop ticks (inside the TaskGroup): an interval-driven loop has not ticked within
   max(period x TASKQ_WATCHDOG_TICK_GRACE_FACTOR, TASKQ_WATCHDOG_STALE_FLOOR).
3. Sibling contract: a long-lived loop returned while the worker was running (runtime.py).
4. LoopLagWatchdog (a daemon thread): the event loop has not run a scheduled beat within
   TASKQ_WATCHDOG_LOOP_LAG_BUDGET, i.e. something blocks it.

A stopped process is not a hung one: after a SIGSTOP, a VM pause or a suspended host, every
loop's last tick is old, but so is the detector's own last check. Detectors 2 and 4 tell the
two apart by their own lateness: one that finds it did not run for longer than
``STOPPED_AFTER`` past its period counts the gap as a stop, gives every loop a fresh budget
and checks again next time (the worker's stall handler does the same, ``LoopLiveness.restart``).

A trip logs at CRITICAL, dumps every task's stack (names and await sites only, never locals
or payloads), flushes, and calls ``os._exit(2)`` with no further awaits: a wedged process
cannot be trusted to unwind. Its jobs are reclaimed by the leader when their leases expire.

Every "how long has it been" reading comes from the worker's injected clock, so a FakeClock
that does not move never trips a detector. Only the pauses between checks are real waits.
Each clock-driven detector decides in a ``run_once``/``check`` that tests call directly.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskq_core.clock import Clock
from taskq_core.constants import EXIT_WATCHDOG
from taskq_core.obs.metrics import flush, instruments, labels

# How long a trip waits for the telemetry SDK to push the trip before the process exits.
TRIP_FLUSH_SECONDS = 1.0
# A detector that ran this many seconds later than its period was stopped with its process.
STOPPED_AFTER = 1.0


def overslept(started: float, now: float, period: float) -> bool:
    """Whether a wait of ``period`` that began at ``started`` ended so late (at ``now``) that the
    process itself did not run meanwhile: a stop, not a hang."""
    return now - started > period + max(period, STOPPED_AFTER)


class LoopLiveness:
    """Per-loop monotonic tick registry (thread-safe: the lag thread reads it)."""

    def __init__(self, clock: Clock, *, grace_factor: float, stale_floor: float) -> None:
        self.clock = clock
        self.grace_factor = grace_factor
        self.stale_floor = stale_floor
        self._ticks: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def tick(self, name: str, *, period: float) -> None:
        """Record that loop ``name`` (running every ``period`` seconds) just made progress."""
        with self._lock:
            self._ticks[name] = (self.clock.monotonic(), period)

    def forget(self, name: str) -> None:
        """Stop tracking a loop whose gate closed (e.g. leader loops on a follower)."""
        with self._lock:
            self._ticks.pop(name, None)

    def ages(self) -> dict[str, float]:
        """Seconds since each tracked loop last ticked."""
        now = self.clock.monotonic()
        with self._lock:
            return {name: now - at for name, (at, _) in self._ticks.items()}

    def restart(self) -> None:
        """Count every tracked loop as having ticked now: the process did not run for a while
        (a stop, a pause), so no loop could have ticked; each gets a fresh budget."""
        now = self.clock.monotonic()
        with self._lock:
            self._ticks = {name: (now, period) for name, (_, period) in self._ticks.items()}

    def any_ticked(self) -> bool:
        """Whether any loop has ticked yet (arms the lag detector early)."""
        with self._lock:
            return bool(self._ticks)

    def stale(self) -> list[str]:
        """Loops whose last tick is older than their budget."""
        now = self.clock.monotonic()
        with self._lock:
            return [
                name
                for name, (at, period) in self._ticks.items()
                if now - at > max(period * self.grace_factor, self.stale_floor)
            ]


def dump_task_stacks(log: Any, reason: str) -> list[dict[str, Any]]:
    """One record per live asyncio task (name, coroutine, await sites); also to stderr."""
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()
    records = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        coro = task.get_coro()
        frames = [
            f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}" for f in task.get_stack()
        ]
        record = {
            "task": task.get_name(),
            "coro": getattr(coro, "__qualname__", repr(coro)),
            "frames": frames,
        }
        records.append(record)
        log.warning("task_stack", reason=reason, **record)
    print(f"taskq task dump ({reason}): {len(records)} task(s)", file=sys.stderr)
    for record in records:
        print(f"  {record['task']} {record['coro']}", file=sys.stderr)
        for frame in record["frames"]:
            print(f"    {frame}", file=sys.stderr)
    return records


def trip(log: Any, detector: str, reason: str, *, dump: bool = True) -> None:
    """The terminal path: log, dump, flush, ``os._exit(2)``."""
    log.critical("worker_watchdog_trip", detector=detector, reason=reason)
    instruments().watchdog_trips.add(1, labels(detector=detector))
    if dump:
        dump_task_stacks(log, f"watchdog:{detector}")
    else:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    flush(TRIP_FLUSH_SECONDS)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_WATCHDOG)


class LoopLagWatchdog:
    """Detector 4: a daemon thread that trips when the event loop stops scheduling beats."""

    # Plain field assignments, alike the constructors of HookPipe, Completer, ParentWatch and
    # ShutdownWatchdog below by shape only: other data.
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        liveness: LoopLiveness,
        log: Any,
        clock: Clock,
        *,
        budget: float,
        startup_grace: float,
        check_interval: float,
    ) -> None:
        self.loop = loop
        self.liveness = liveness
        self.log = log
        self.clock = clock
        self.budget = budget
        self.startup_grace = startup_grace
        self.check_interval = check_interval
        self._last_beat = clock.monotonic()
        self._started = clock.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskq-loop-lag", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (it exits at its next check)."""
        self._stop.set()

    def beat(self) -> None:
        """The event loop ran a scheduled callback: it is not blocked."""
        self._last_beat = self.clock.monotonic()

    def check(self) -> str | None:
        """One check: the trip reason when the loop has been blocked past the budget, else None.

        Unarmed (within the start-up grace and before any loop ticked), a missing beat is
        start-up work, not a hang: the check counts it as a beat.
        """
        now = self.clock.monotonic()
        armed = now - self._started >= self.startup_grace or self.liveness.any_ticked()
        if not armed:
            self._last_beat = now
            return None
        blocked = now - self._last_beat
        if blocked > self.budget:
            return f"event loop blocked for {blocked:.1f}s"
        return None

    def check_after_wait(self, waited_from: float) -> str | None:
        """``check`` after this thread's wait that began at ``waited_from``: a wait that ended
        far too late means the whole process was stopped, which counts as a beat."""
        if overslept(waited_from, self.clock.monotonic(), self.check_interval):
            self._last_beat = self.clock.monotonic()
        return self.check()

    def _run(self) -> None:
        try:
            while True:
                waited_from = self.clock.monotonic()
                if self._stop.wait(self.check_interval):
                    return
                reason = self.check_after_wait(waited_from)
                if reason is not None:
                    trip(self.log, "loop-lag", reason, dump=False)
                try:
                    self.loop.call_soon_threadsafe(self.beat)
                except RuntimeError:
                    return  # the loop is closed: the worker is exiting
        except BaseException as exc:  # a dead watchdog must not die silently
            self.log.critical("watchdog_thread_died", error=repr(exc))


async def stale_loop_watchdog(
    liveness: LoopLiveness, log: Any, *, check_interval: float, shutdown: asyncio.Event
) -> None:
    """Detector 2: trip when any interval-driven loop stops ticking (but not when the whole
    process stopped: see the module docstring)."""
    clock = liveness.clock
    while not shutdown.is_set():
        stale = liveness.stale()
        if stale:
            trip(log, "stale-loop", f"loops stopped ticking: {', '.join(stale)}")
        waited_from = clock.monotonic()
        try:
            await asyncio.wait_for(shutdown.wait(), check_interval)
        except TimeoutError:
            pass
        if overslept(waited_from, clock.monotonic(), check_interval):
            liveness.restart()


@dataclass(frozen=True)
class ShutdownCheck:
    """What one pass of the shutdown watchdog decided."""

    tripped: bool  # the budget is spent
    dump: bool  # past the dump fraction: log the tasks the shutdown still waits for
    wait: float  # seconds until the next check is due


class ShutdownWatchdog:
    """Detector 1: once shutdown begins, trip if it is not done within ``budget`` seconds.

    The budget counts from the first shutdown signal (the monotonic time the orchestrator
    stamped). Once the shutdown has used ``dump_after_fraction`` of it, the still-alive tasks
    are logged every ``dump_interval`` seconds (TASKQ_WATCHDOG_DUMP_*): what a slow shutdown
    waits for.
    """

    # Plain field assignments, alike the constructors of LoopLagWatchdog above and
    # worker/progress.py's JobProgress by shape only: other data.
    def __init__(
        self,
        clock: Clock,
        log: Any,
        *,
        budget: float,
        dump_interval: float = 5.0,
        dump_after_fraction: float = 0.5,
    ) -> None:
        self.clock = clock
        self.log = log
        self.budget = budget
        self.dump_interval = dump_interval
        self.dump_after_fraction = dump_after_fraction
        self.begun: float | None = None

    def arm(self, begun: float | None = None) -> None:
        """Start counting from ``begun`` (monotonic), or from now when it is unknown."""
        self.begun = self.clock.monotonic() if begun is None else begun
        self.log.info("shutdown_watchdog_armed", budget=self.budget)

    def run_once(self) -> ShutdownCheck:
        """One pass over the armed budget; never trips before ``arm``."""
        if self.begun is None:
            return ShutdownCheck(tripped=False, dump=False, wait=self.dump_interval)
        now = self.clock.monotonic()
        deadline = self.begun + self.budget
        dump_from = self.begun + self.budget * self.dump_after_fraction
        if now >= deadline:
            return ShutdownCheck(tripped=True, dump=False, wait=0.0)
        if now >= dump_from:
            wait = min(self.dump_interval, deadline - now)
            return ShutdownCheck(tripped=False, dump=True, wait=wait)
        return ShutdownCheck(tripped=False, dump=False, wait=min(dump_from, deadline) - now)

    async def run(
        self, started_at: Callable[[], float | None], shutdown_begun: asyncio.Event
    ) -> None:
        """Wait for the shutdown to begin, then check until the budget is spent and trip."""
        await shutdown_begun.wait()
        self.arm(started_at())
        while True:
            check = self.run_once()
            if check.tripped:
                trip(self.log, "shutdown-deadline", f"shutdown took longer than {self.budget:g}s")
                return
            if check.dump:
                dump_task_stacks(self.log, "shutdown_stragglers")
            await asyncio.sleep(check.wait)
