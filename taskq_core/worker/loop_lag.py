"""LoopLagSampler: how late the event loop runs what is due, as a histogram.

Every ``PERIOD`` the sampler asks the loop to wake it and records how much later than asked
it woke (``taskq.worker.loop_lag``, seconds). A healthy loop answers within a millisecond; a
body that blocks the loop, a garbage collection, a long synchronous step (encoding a big
flush, a callback doing I/O) shows up as lag, and lag is what stretches the tail of a job's
enqueue-to-start latency: a claimed job waits for the loop like everything else. The
watchdog's loop-lag detector trips past a budget of seconds; this measures every lag below it.

Twenty samples a second cost a timer and one histogram record each (nothing without an SDK).
"""

from __future__ import annotations

import asyncio

from taskq_core.worker.deps import WorkerDeps

PERIOD = 0.05  # seconds between samples: short enough to catch stalls of a few milliseconds


class LoopLagSampler:
    """Records the loop's lateness every ``PERIOD`` until the worker shuts down."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        shutdown = self.deps.state.shutdown_event
        record = self.deps.meters.loop_lag.record
        while not shutdown.is_set():
            due = loop.time() + PERIOD
            await asyncio.sleep(PERIOD)
            record(max(0.0, loop.time() - due))
