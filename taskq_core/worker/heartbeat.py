"""HeartbeatLoop: proves this worker alive, keeps its leases, and drives cancellation.

Each tick is one backend transaction (worker row, job leases, reservation leases, leader
ping, cancel flags), then the cancel controller acts and writes abandonments after the
transaction. A cancel NOTIFY wakes the loop early for a cheap cancel-flag poll, so a running
job sees its cancel within a second instead of a heartbeat later. Consecutive failures past
``max_heartbeat_failures`` isolate the worker: its jobs are handed back and it shuts down.
"""

from __future__ import annotations

from datetime import timedelta

from taskq_core.constants import EXIT_ERROR
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.transient import TRANSIENT_ERRORS, UnexpectedErrorGuard
from taskq_core.worker.waits import wait_any

ISOLATION_RETRY_DELAY = timedelta(seconds=5)


class HeartbeatLoop:
    """Heartbeat plus cancel polling for one worker."""

    def __init__(self, deps: WorkerDeps, controller: CancelController) -> None:
        self.deps = deps
        self.controller = controller
        self.failures = 0
        self._guard = UnexpectedErrorGuard("heartbeat", deps.log)

    async def run_once(self) -> int:
        """One full heartbeat; returns how many leases were extended."""
        deps = self.deps
        result = await deps.backend.heartbeat(
            deps.worker_id, deps.settings.lock_lease_delta, is_leader=deps.is_leader.is_set()
        )
        self.controller.observe(result.cancel_flags)
        try:
            await self.controller.advance()
        finally:
            await self.controller.run_post_tx()
        return result.leases_extended

    async def poll_cancels(self) -> None:
        """The cheap path on a cancel NOTIFY or a due escalation."""
        flags = await self.deps.backend.poll_cancel_flags(self.deps.worker_id)
        self.controller.observe(flags)
        try:
            await self.controller.advance()
        finally:
            await self.controller.run_post_tx()

    async def run(self) -> None:
        """Tick until shutdown; isolate the worker after too many failures in a row."""
        deps = self.deps
        interval = deps.settings.heartbeat_interval
        next_beat = deps.clock.monotonic() + interval  # registration counted as the first beat
        async with deps.backend.subscribe_cancel_wake() as cancel_wake:
            while not deps.shutdown_event.is_set():
                deps.liveness.tick("heartbeat", period=interval)
                now = deps.clock.monotonic()
                try:
                    if now >= next_beat:
                        next_beat = now + interval
                        await self.run_once()
                        self.failures = 0
                    else:
                        await self.poll_cancels()
                    self._guard.succeeded()
                except TRANSIENT_ERRORS as exc:
                    self.failures += 1
                    deps.log.warning("heartbeat_failed", error=repr(exc), consecutive=self.failures)
                    if self.failures > deps.settings.max_heartbeat_failures:
                        deps.liveness.forget("heartbeat")
                        await self.isolate_self()
                        return
                except Exception as exc:
                    self._guard.failed(exc)
                cancel_wake.clear()
                wake_at = next_beat
                deadline = self.controller.next_deadline()
                if deadline is not None:
                    wake_at = min(wake_at, deadline)
                timeout = max(0.0, wake_at - deps.clock.monotonic())
                await wait_any(cancel_wake, deps.shutdown_event, timeout=timeout)
        deps.liveness.forget("heartbeat")

    async def isolate_self(self) -> None:
        """Hand this worker's running jobs back (or crash them) and shut the worker down."""
        deps = self.deps
        deps.log.error("heartbeat_lost_isolating", failures=self.failures)
        try:
            await deps.backend.isolate_worker(deps.worker_id, ISOLATION_RETRY_DELAY)
        except Exception as exc:  # the leases expire anyway; the reclaim sweep is the backstop
            deps.log.error("isolate_failed", error=repr(exc))
        deps.exit_code = EXIT_ERROR
        for active in deps.active.all():
            if active.task is not None:
                active.task.cancel()
        deps.producer_stop.set()
        deps.consumer_stop.set()
        deps.shutdown_event.set()
