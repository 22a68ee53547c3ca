"""Scheduled promotion: scheduled jobs that are due become pending (the backend NOTIFYs), on
time.

Between two passes the leader waits until the earliest scheduled job is due (read after each
pass), at most TASKQ_SCHEDULED_WAKE_INTERVAL, and sooner when a job enqueued meanwhile is
announced due earlier (``Backend.subscribe_scheduled``: the enqueue's events NOTIFY says how
soon). So a job enqueued with ``delay=0.2`` or a near ``run_at`` is promoted when it is due,
not at the next interval. Jobs a worker reschedules (a retry's backoff, a snooze, a
retry-after, a release) are announced the same way by the settle that reschedules them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from taskq_core.backend.protocol import ScheduledAnnouncements
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.waits import wait_any


class ScheduledPromotion:
    """Promotes due scheduled jobs, then waits for the next one (see the module docstring)."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.heard: ScheduledAnnouncements | None = None
        self.next_due_in: float | None = None  # after the last pass, on the backend's clock

    @asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """Hear the announcements of jobs enqueued to wait for a time, while in the block."""
        async with self.deps.backend.subscribe_scheduled() as heard:
            self.heard = heard
            try:
                yield
            finally:
                self.heard = None

    async def run_once(self) -> int:
        """Promote due jobs and read when the next is due; returns how many were promoted."""
        backend = self.deps.backend
        promoted = await backend.promote_scheduled_jobs()
        if promoted:
            self.deps.meters.scheduled_promoted.add(promoted)
        self.next_due_in = await backend.get_next_due_in()
        return promoted

    async def pause(self, interval: float) -> None:
        """Wait until the earliest known scheduled job is due, at most ``interval`` seconds,
        or until the worker shuts down."""
        shutdown = self.deps.state.shutdown_event
        wait = interval if self.next_due_in is None else min(interval, self.next_due_in)
        target = time.monotonic() + wait
        while not shutdown.is_set():
            heard = self.heard
            announced = None if heard is None else heard.take()
            if announced is not None:
                target = min(target, announced)
            remaining = target - time.monotonic()
            if remaining <= 0:
                return
            events = [shutdown] if heard is None else [shutdown, heard.event]
            await wait_any(*events, timeout=remaining)
