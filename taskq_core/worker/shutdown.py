"""Graceful shutdown: NONE -> DRAINING -> CANCELLING -> FORCING -> ABANDONING.

DRAINING stops the producer and re-pends the jobs claimed but not started (the local
queue). CANCELLING sets every running job's cancel_event and waits up to
TASKQ_CANCELLATION_GRACE_PERIOD for cooperative exits; a job interrupted by shutdown goes
back to the queue (it did not fail, and nobody asked to cancel it). FORCING cancels the
remaining tasks and waits up to TASKQ_CLEANUP_GRACE_PERIOD. ABANDONING gives up on what is
left: those rows stay running until their lease expires and the leader reclaims them.

Signals: the first SIGTERM/SIGINT starts the sequence, the second skips to FORCING, the
third exits at once with code 1.
"""

from __future__ import annotations

import asyncio
import os
import signal
from contextlib import suppress

from taskq_core.constants import EXIT_ERROR
from taskq_core.errors import ConfigError
from taskq_core.obs.logs import configure_logging
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import ShutdownPhase, WorkerDeps
from taskq_core.worker.watchdog import dump_task_stacks


class ShutdownOrchestrator:
    """Runs the shutdown phases once; counts signals for escalation."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.escalate = asyncio.Event()
        self.signals_seen = 0
        self._task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()

    def request(self, reason: str) -> None:
        """Start the shutdown (idempotent); repeated signals escalate."""
        if self._task is None:
            self.deps.shutdown_started_at = self.deps.clock.monotonic()
            self.deps.shutdown_begun.set()
            self.deps.log.info("worker_stopping", reason=reason)
            self._task = asyncio.get_running_loop().create_task(self.orchestrate(), name="shutdown")

    def on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT handler: start, escalate, then exit hard."""
        self.signals_seen += 1
        if self.signals_seen == 1:
            self.request(signal.Signals(signum).name)
        elif self.signals_seen == 2:
            self.deps.log.warning("shutdown_escalated")
            self.escalate.set()
        else:
            os._exit(EXIT_ERROR)

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT escalate shutdown; SIGUSR2 dumps task stacks; SIGHUP reloads."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.on_signal, signum)
        loop.add_signal_handler(signal.SIGUSR2, dump_task_stacks, self.deps.log, "sigusr2")
        loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        """SIGHUP: re-read settings; apply the log level, report what needs a restart."""
        deps = self.deps
        try:
            fresh = TaskqSettings.load()
        except ConfigError as exc:
            deps.log.error("worker_reload_failed", error=str(exc))
            return
        configure_logging(fmt=fresh.log_format, level=fresh.log_level)
        changed = sorted(
            name
            for name in type(fresh).model_fields
            if getattr(fresh, name) != getattr(deps.settings, name) and name != "log_level"
        )
        deps.log.info("worker_reloaded", log_level=fresh.log_level, restart_required_for=changed)

    async def orchestrate(self) -> None:
        """Run every phase in order, then release all loops."""
        deps = self.deps
        try:
            await self._drain()
            if len(deps.active):
                await self._cancel_cooperatively()
            if len(deps.active):
                await self._force()
            if len(deps.active):
                deps.shutdown_phase = ShutdownPhase.ABANDONING
                deps.log.error(
                    "shutdown_abandoning_jobs",
                    job_ids=[str(a.job.id) for a in deps.active.all()],
                    note="left running; the leader reclaims them when their lease expires",
                )
        finally:
            deps.consumer_stop.set()
            deps.shutdown_event.set()
            self.done.set()

    async def _drain(self) -> None:
        deps = self.deps
        deps.shutdown_phase = ShutdownPhase.DRAINING
        deps.producer_stop.set()
        unstarted = []
        while not deps.local_queue.empty():  # no await in this loop: consumers cannot race it
            unstarted.append(deps.local_queue.get_nowait().id)
        if unstarted:
            try:
                released = await deps.backend.release_unstarted(deps.worker_id, unstarted)
                deps.log.info("shutdown_released_unstarted", count=released)
            except Exception as exc:  # the lease expires and the reclaim sweep re-pends them
                deps.log.warning("shutdown_release_failed", error=repr(exc))

    async def _cancel_cooperatively(self) -> None:
        deps = self.deps
        deps.shutdown_phase = ShutdownPhase.CANCELLING
        now = deps.clock.monotonic()
        for active in deps.active.all():
            active.cancel_reason = "shutdown"
            active.cancel_observed_at = active.cancel_observed_at or now
            active.ctx.signal_cancel()
        await self._wait_idle(deps.settings.cancellation_grace_period)

    async def _force(self) -> None:
        deps = self.deps
        deps.shutdown_phase = ShutdownPhase.FORCING
        for active in deps.active.all():
            active.cancel_reason = "shutdown"
            if active.task is not None:
                active.task.cancel()
        self.escalate.clear()
        await self._wait_idle(deps.settings.cleanup_grace_period)

    async def _wait_idle(self, seconds: float) -> None:
        """Wait until no job runs, ``seconds`` pass, or a further signal escalates."""
        idle = asyncio.ensure_future(self.deps.active.idle.wait())
        escalated = asyncio.ensure_future(self.escalate.wait())
        try:
            await asyncio.wait({idle, escalated}, timeout=seconds, return_when="FIRST_COMPLETED")
        finally:
            for waiter in (idle, escalated):
                waiter.cancel()
                with suppress(asyncio.CancelledError):
                    await waiter
