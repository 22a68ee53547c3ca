"""What wakes the workgroup's loop: signals, a child's exit, the next deadline.

SIGTERM/SIGINT stop the group, SIGHUP reloads the file, SIGCHLD only wakes the loop; between
passes ``run()`` sleeps until one of them, the next timed action, or ``MAX_IDLE_SLEEP``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

from taskq_core.clock import Clock

# Upper bound on one sleep of run(): a lost SIGCHLD costs at most this much latency.
MAX_IDLE_SLEEP = 1.0


class Wakeup:
    """The loop's alarm: set by a signal or a child's exit, or rung by a deadline."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = asyncio.Event()

    def set(self) -> None:
        """Make the loop do a pass now."""
        self._event.set()

    def clear(self) -> None:
        """A pass begins: what woke the loop is being handled."""
        self._event.clear()

    async def sleep(self, deadline: float | None) -> None:
        """Sleep until woken, the monotonic ``deadline`` or ``MAX_IDLE_SLEEP``."""
        timeout = MAX_IDLE_SLEEP
        if deadline is not None:
            timeout = min(timeout, max(0.005, deadline - self._clock.monotonic()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


@contextlib.contextmanager
def signal_handlers(
    install: bool,
    *,
    on_stop: Callable[[int], None],
    on_reload: Callable[[], None],
    on_child: Callable[[], None],
) -> Iterator[None]:
    """The group's signal handlers on the running loop, removed on exit (if ``install``)."""
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    if install:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_stop, signum)
        loop.add_signal_handler(signal.SIGHUP, on_reload)
        loop.add_signal_handler(signal.SIGCHLD, on_child)
        handled = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD]
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
