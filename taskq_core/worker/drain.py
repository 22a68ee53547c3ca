"""DrainMonitor (``--until-idle``): stop the worker once its queues stay empty.

Every TASKQ_IDLE_POLL_INTERVAL it counts pending, scheduled and running jobs in this worker's
queues (across all workers) plus this worker's own in-flight jobs. When that stays zero for
TASKQ_IDLE_SETTLE_WINDOW it requests a graceful shutdown with exit 0, or 3 when any job this
worker ran failed for good. Past ``--idle-max-runtime`` it stops with exit 4.
"""

from __future__ import annotations

from collections.abc import Callable

from taskq_core.constants import EXIT_IDLE_FAILURES, EXIT_IDLE_MAX_RUNTIME, EXIT_OK
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import wait_or_shutdown
from taskq_core.worker.transient import TRANSIENT_ERRORS


class DrainMonitor:
    """Watches for idleness and decides the until-idle exit code."""

    def __init__(self, deps: WorkerDeps, request_shutdown: Callable[[str], None]) -> None:
        self.deps = deps
        self.request_shutdown = request_shutdown
        self.started_at = deps.clock.monotonic()
        self.idle_since: float | None = None

    async def run_once(self) -> int | None:
        """One check; returns the exit code when the worker should stop, else None."""
        deps = self.deps
        now = deps.clock.monotonic()
        max_runtime = deps.settings.idle_max_runtime
        if max_runtime is not None and now - self.started_at >= max_runtime:
            return EXIT_IDLE_MAX_RUNTIME
        # Settling jobs count as busy: a failure written but not yet counted would otherwise
        # end the drain with exit 0 (the store already says terminal, the stats do not).
        # A job claimed and settled while the database answered is busy too: the store may
        # have read it terminal before what its end causes was written (a batch's finalizer,
        # enqueued by the hook after the child's success committed).
        changes = deps.active.changes
        busy = (
            deps.active.holding() > 0
            or await deps.backend.has_active_jobs(deps.queues)
            or deps.active.changes != changes
        )
        if busy:
            self.idle_since = None
            return None
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since >= deps.settings.idle_settle_window:
            return EXIT_IDLE_FAILURES if deps.state.stats.failed else EXIT_OK
        return None

    async def run(self) -> None:
        """Check until idle (or out of time), then request the shutdown."""
        deps = self.deps
        while not deps.state.shutdown_event.is_set() and deps.state.shutdown_phase == 0:
            try:
                code = await self.run_once()
            except TRANSIENT_ERRORS as exc:
                deps.database.failed("drain_monitor", exc)
                code = None
            if code is not None:
                deps.state.exit_code = code
                deps.log.info("worker_idle", exit_code=code, failed=deps.state.stats.failed)
                self.request_shutdown("idle" if code != EXIT_IDLE_MAX_RUNTIME else "max_runtime")
                break
            await wait_or_shutdown(deps, deps.settings.idle_poll_interval)
        await deps.state.shutdown_event.wait()
