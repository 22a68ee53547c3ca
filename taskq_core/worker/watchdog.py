"""The in-worker watchdog: four detectors that turn a hang into a restart.

1. ShutdownWatchdog (outside the TaskGroup): shutdown still running after
   TASKQ_TERMINATION_GRACE_PERIOD, counted from the first shutdown signal.
2. Stale loop ticks (inside the TaskGroup): an interval-driven loop has not ticked within
   max(period x TASKQ_WATCHDOG_TICK_GRACE_FACTOR, TASKQ_WATCHDOG_STALE_FLOOR).
3. Sibling contract: a long-lived loop returned while the worker was running (runtime.py).
4. LoopLagWatchdog (a daemon thread): the event loop has not run a scheduled beat within
   TASKQ_WATCHDOG_LOOP_LAG_BUDGET, i.e. something blocks it.

A trip logs at CRITICAL, dumps every task's stack (names and await sites only, never locals
or payloads), flushes, and calls ``os._exit(2)`` with no further awaits: a wedged process
cannot be trusted to unwind. Its jobs are reclaimed by the leader when their leases expire.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import sys
import threading
import time
from typing import Any

from taskq_core.constants import EXIT_WATCHDOG
from taskq_core.obs.metrics import instruments


class LoopLiveness:
    """Per-loop monotonic tick registry (thread-safe: the lag thread reads it)."""

    def __init__(self, *, grace_factor: float, stale_floor: float) -> None:
        self.grace_factor = grace_factor
        self.stale_floor = stale_floor
        self._ticks: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def tick(self, name: str, *, period: float) -> None:
        """Record that loop ``name`` (running every ``period`` seconds) just made progress."""
        with self._lock:
            self._ticks[name] = (time.monotonic(), period)

    def forget(self, name: str) -> None:
        """Stop tracking a loop whose gate closed (e.g. leader loops on a follower)."""
        with self._lock:
            self._ticks.pop(name, None)

    def ages(self) -> dict[str, float]:
        """Seconds since each tracked loop last ticked."""
        now = time.monotonic()
        with self._lock:
            return {name: now - at for name, (at, _) in self._ticks.items()}

    def any_ticked(self) -> bool:
        """Whether any loop has ticked yet (arms the lag detector early)."""
        with self._lock:
            return bool(self._ticks)

    def stale(self) -> list[str]:
        """Loops whose last tick is older than their budget."""
        now = time.monotonic()
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
    instruments().watchdog_trips.add(1, {"detector": detector})
    if dump:
        dump_task_stacks(log, f"watchdog:{detector}")
    else:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_WATCHDOG)


class LoopLagWatchdog:
    """Detector 4: a daemon thread that trips when the event loop stops scheduling beats."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        liveness: LoopLiveness,
        log: Any,
        *,
        budget: float,
        startup_grace: float,
        check_interval: float,
    ) -> None:
        self.loop = loop
        self.liveness = liveness
        self.log = log
        self.budget = budget
        self.startup_grace = startup_grace
        self.check_interval = check_interval
        self._last_beat = time.monotonic()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskq-loop-lag", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (it exits at its next check)."""
        self._stop.set()

    def _beat(self) -> None:
        self._last_beat = time.monotonic()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.check_interval):
                now = time.monotonic()
                armed = now - self._started >= self.startup_grace or self.liveness.any_ticked()
                if not armed:
                    self._last_beat = now
                elif now - self._last_beat > self.budget:
                    blocked = now - self._last_beat
                    trip(self.log, "loop-lag", f"event loop blocked for {blocked:.1f}s", dump=False)
                try:
                    self.loop.call_soon_threadsafe(self._beat)
                except RuntimeError:
                    return  # the loop is closed: the worker is exiting
        except BaseException as exc:  # a dead watchdog must not die silently
            self.log.critical("watchdog_thread_died", error=repr(exc))


async def stale_loop_watchdog(
    liveness: LoopLiveness, log: Any, *, check_interval: float, shutdown: asyncio.Event
) -> None:
    """Detector 2: trip when any interval-driven loop stops ticking."""
    while not shutdown.is_set():
        stale = liveness.stale()
        if stale:
            trip(log, "stale-loop", f"loops stopped ticking: {', '.join(stale)}")
        try:
            await asyncio.wait_for(shutdown.wait(), check_interval)
        except TimeoutError:
            pass


async def shutdown_watchdog(
    started_at: Any,
    log: Any,
    *,
    budget: float,
    shutdown_begun: asyncio.Event,
    dump_interval: float = 5.0,
    dump_after_fraction: float = 0.5,
) -> None:
    """Detector 1: once shutdown begins, trip if it is not done within ``budget`` seconds.

    ``started_at`` returns the monotonic time of the first shutdown signal. Once the shutdown
    has used ``dump_after_fraction`` of its budget, the still-alive tasks are logged every
    ``dump_interval`` seconds (TASKQ_WATCHDOG_DUMP_*): what a slow shutdown waits for.
    """
    await shutdown_begun.wait()
    begun = started_at() or time.monotonic()
    deadline = begun + budget
    dump_from = begun + budget * dump_after_fraction
    log.info("shutdown_watchdog_armed", budget=budget)
    while (now := time.monotonic()) < deadline:
        if now >= dump_from:
            dump_task_stacks(log, "shutdown_stragglers")
            await asyncio.sleep(min(dump_interval, deadline - now))
        else:
            await asyncio.sleep(min(dump_from, deadline) - now)
    trip(log, "shutdown-deadline", f"shutdown took longer than {budget:g}s")
