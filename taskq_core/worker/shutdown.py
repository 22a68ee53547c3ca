"""Graceful shutdown: NONE -> DRAINING -> CANCELLING -> FORCING -> ABANDONING.

DRAINING stops the producer and re-pends the jobs claimed but not started (the local
queue) without using their attempts. CANCELLING sets every running job's cancel_event and
waits up to TASKQ_CANCELLATION_GRACE_PERIOD for cooperative exits; a job interrupted by
shutdown goes back to the queue (it did not fail, and nobody asked to cancel it), while a
job an operator asked to cancel keeps that reason and ends cancelled. FORCING writes
cancel_phase 2 for each remaining job, then cancels its task, and waits up to
TASKQ_CLEANUP_GRACE_PERIOD. ABANDONING writes ``abandoned`` for whatever still runs (a
plain ``def`` actor's thread cannot be stopped; the job says so) and releases its consumer.

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
from taskq_core.worker.active import CancelPhase
from taskq_core.worker.cancel import count_transition, write_abandoned
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.state import ShutdownPhase
from taskq_core.worker.transient import TRANSIENT_ERRORS
from taskq_core.worker.watchdog import dump_task_stacks

# What SIGHUP applies at once; a change to any other setting is reported as needing a restart.
_APPLIED_ON_RELOAD = frozenset({"log_level", "log_format"})


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
            self.deps.state.shutdown_started_at = self.deps.clock.monotonic()
            self.deps.state.shutdown_begun.set()
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
        """SIGHUP: re-read settings; apply the log level and format, report what needs a
        restart."""
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
            if getattr(fresh, name) != getattr(deps.settings, name)
            and name not in _APPLIED_ON_RELOAD
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
                await self._abandon()
        finally:
            deps.state.consumer_stop.set()
            deps.state.shutdown_event.set()
            self.done.set()

    async def _drain(self) -> None:
        deps = self.deps
        deps.state.shutdown_phase = ShutdownPhase.DRAINING
        deps.state.producer_stop.set()
        unstarted = []
        while not deps.local_queue.empty():  # no await in this loop: consumers cannot race it
            held = deps.local_queue.get_nowait()
            deps.active.remove(held)
            if held.lost is None:
                unstarted.append(held.lease)
        if unstarted:
            try:
                released = await deps.backend.release_leases(
                    deps.worker_id, unstarted, reason="shutdown_drain"
                )
                deps.log.info("shutdown_released_unstarted", count=released)
            except Exception as exc:  # the lease expires and the reclaim sweep re-pends them
                deps.log.warning("shutdown_release_failed", error=repr(exc))

    async def _cancel_cooperatively(self) -> None:
        deps = self.deps
        deps.state.shutdown_phase = ShutdownPhase.CANCELLING
        now = deps.clock.monotonic()
        for held in deps.active.running():
            if held.cancel_reason != "requested" or held.cancel_observed_at is None:
                held.cancel_reason = "shutdown"  # an operator's cancel in progress stays one
            if held.cancel_phase == CancelPhase.NONE:
                count_transition(deps, held, CancelPhase.COOPERATIVE)
            held.cancel_observed_at = held.cancel_observed_at or now
            if held.ctx is not None:
                held.ctx.signal_cancel()
        await self._wait_idle(deps.settings.cancellation_grace_period)

    # Shaped as _cancel_cooperatively above and _abandon below on purpose: each phase marks
    # itself and walks the running jobs; what each does to a job differs.
    async def _force(self) -> None:
        deps = self.deps
        deps.state.shutdown_phase = ShutdownPhase.FORCING
        for held in deps.active.running():
            if held.lost is None and held.cancel_phase < CancelPhase.FORCED:
                try:
                    await deps.backend.write_cancel_escalation(held.lease, reason="shutdown")
                except TRANSIENT_ERRORS as exc:  # stopping must not wait for the database
                    deps.log.warning(
                        "shutdown_escalation_unwritten", job_id=str(held.job.id), error=str(exc)
                    )
            if held.cancel_phase < CancelPhase.FORCED:
                held.cancel_phase = CancelPhase.FORCED
                count_transition(deps, held, CancelPhase.FORCED)
            if held.task is not None:  # no await since the write
                held.task.cancel()
        self.escalate.clear()
        await self._wait_idle(deps.settings.cleanup_grace_period)

    async def _abandon(self) -> None:
        """Write off the jobs that ignored even the forced cancel."""
        deps = self.deps
        deps.state.shutdown_phase = ShutdownPhase.ABANDONING
        for held in deps.active.running():
            if held.lost is not None:
                held.abandon()
                continue
            count_transition(deps, held, CancelPhase.ABANDON_PENDING)
            try:
                await write_abandoned(deps, held)
            except TRANSIENT_ERRORS as exc:
                deps.log.error(
                    "shutdown_abandon_unwritten",
                    job_id=str(held.job.id),
                    error=str(exc),
                    note="left running; the leader reclaims it when its lease expires",
                )
                held.cancel_phase = CancelPhase.ABANDON_PENDING
                held.abandon()
                deps.active.remove(held)

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
