"""WorkgroupManager: runs the children of a workgroup plan and keeps them up.

Each child slot (one per label, ``api-1`` ...) moves through these states:

    PENDING --spawn--> RUNNING --exit--> BACKOFF --delay elapsed--> RUNNING (child_restarted)
    RUNNING --stale heartbeat--> SIGKILL, then handled as an exit      (child_stale_killed)
    RUNNING/BACKOFF --spec past its burst limit--> GIVEN_UP            (spec_given_up)
    RUNNING --until-idle exit 0/3/4--> FINISHED
    any --group stop--> STOPPING (SIGTERM + SIGCONT to its process group) --exit--> FINISHED
    RUNNING --operator restart--> STOPPING --exit--> RUNNING at once   (child_restarted)
    RUNNING --removed from the file by a reload--> STOPPING --exit--> gone

A given-up spec is not restarted on its own again (only an operator's ``restart`` or a reload
that changes it does), but its children still running keep serving; the other specs are
unaffected. The group stops on SIGTERM/SIGINT: every child gets SIGTERM, each further stop
signal is forwarded again (the worker escalates on its second and third), and children still
alive after ``shutdown_timeout`` get SIGKILL. SIGHUP reloads: the file is read again, changed
children are restarted, new ones started, removed ones stopped, and the unchanged ones get the
SIGHUP (a worker re-reads its settings). An operator's restart of a child is graceful too:
SIGTERM, SIGKILL after ``shutdown_timeout``, and a new child as soon as the old one is gone,
without backoff and without counting towards the burst limit.

Each process runs under a worker id the supervisor chose, and each exit reaped is written
into that ``workers`` row (stopped, with the exit status or signal; ``exit_records.py``).
Beside it: ``slots.py``, ``health_check.py``, ``exits.py`` (a give-up, the group's exit
code), ``reload.py``, ``wakeups.py``. Everything that touches the outside world is injected:
the child constructor (``spawn``; the real one is ``children.PopenChild``, wired in by
``runtime.open_workgroup``), the clock, the health source and the exit writer (``workers``
rows) and the event sink (``status``), so tests replay exit and heartbeat histories with
fakes and step ``run_once()`` by hand. ``run()`` only loops.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from taskq_core.clock import Clock, SystemClock
from taskq_core.constants import EXIT_ERROR
from taskq_core.errors import ConfigError
from taskq_core.supervisor.children import ChildFactory
from taskq_core.supervisor.exit_records import ExitRecords, ExitWriter
from taskq_core.supervisor.exits import exit_fields, give_up, group_code
from taskq_core.supervisor.health_check import HealthSource, check_health, is_watched
from taskq_core.supervisor.plan import WorkgroupPlan
from taskq_core.supervisor.policy import (
    HeartbeatWatch,
    RestartHistory,
    decide_restart,
    is_final_exit,
)
from taskq_core.supervisor.reload import ReloadOutcome, check_reloadable
from taskq_core.supervisor.slots import (
    ChildSlot,
    ask_to_stop,
    child_status,
    enforce_kill_deadlines,
    kill,
    next_launch,
)
from taskq_core.supervisor.status import (
    ChildState,
    ChildStatus,
    EventSink,
    SupervisorEvent,
    log_event,
)
from taskq_core.supervisor.wakeups import Wakeup, signal_handlers

# Reads the workgroup file again into a plan of the same instance (raises ConfigError).
PlanReader = Callable[[], WorkgroupPlan]


class WorkgroupManager:
    """Spawns, watches, restarts, health-checks and stops the children of one plan."""

    def __init__(  # alike worker/health.py's HealthServer constructor by shape only
        self,
        plan: WorkgroupPlan,
        *,
        spawn: ChildFactory,
        clock: Clock | None = None,
        health_source: HealthSource | None = None,
        emit: EventSink = log_event,
        hostname: str | None = None,
        base_env: Mapping[str, str] | None = None,
        output_dir: Path | None = None,
        read_plan: PlanReader | None = None,
        record_exit: ExitWriter | None = None,
    ) -> None:
        self.plan = plan
        self._read_plan = read_plan
        self._spawn_child = spawn
        self._clock = clock or SystemClock()
        self._health_source = health_source
        self._emit_event = emit
        self._hostname = hostname or socket.gethostname()
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._output_dir = output_dir
        self._slots = [ChildSlot(plan=child) for child in plan.children]
        self._given_up: set[str] = set()
        self._started = False
        self._stop_deadline: float | None = None
        self._exit_code: int | None = None
        self._wake = Wakeup(self._clock)
        self._exits = ExitRecords(record_exit, self._clock, self._emit)

    # -- public controls ----------------------------------------------------------------

    @property
    def exit_code(self) -> int | None:
        """The group's exit code once it is done, else None."""
        return self._exit_code

    @property
    def stopping(self) -> bool:
        """True once a stop has been requested."""
        return self._stop_deadline is not None

    def wake(self) -> None:
        """Make ``run()`` do a pass now (a child exited, a signal arrived)."""
        self._wake.set()

    def request_stop(self, reason: str) -> None:
        """Stop the group: SIGTERM every child now, SIGKILL survivors after the timeout.

        A repeated request forwards SIGTERM again, which escalates each worker's own
        shutdown (its second signal skips to force-cancelling, the third exits at once).
        """
        now = self._clock.monotonic()
        live = [slot for slot in self._slots if slot.process is not None]
        if self._stop_deadline is None:
            self._stop_deadline = now + self.plan.shutdown_timeout
            self._emit(
                "workgroup_stopping",
                reason=reason,
                children=len(live),
                timeout=self.plan.shutdown_timeout,
            )
            for slot in self._slots:
                if slot.state in (ChildState.PENDING, ChildState.BACKOFF):
                    slot.state, slot.restart_at = ChildState.FINISHED, None
            # Children already asked to stop (a restart, a removal) are not signalled twice:
            # a worker's second SIGTERM would skip its graceful drain.
            live = [slot for slot in live if slot.kill_at is None]
        else:
            self._emit("stop_escalated", "warning", reason=reason, children=len(live))
        for slot in live:
            slot.state = ChildState.STOPPING
            assert slot.process is not None
            slot.process.signal(signal.SIGTERM)
            # A stopped (SIGSTOP) child only acts on SIGTERM once continued, as systemd does.
            slot.process.signal(signal.SIGCONT)
        self.wake()

    def forward_signal(self, signum: int, labels: Sequence[str] | None = None) -> None:
        """Send ``signum`` to every live child's process group (or only those of ``labels``)."""
        live = [
            slot
            for slot in self._slots
            if slot.process is not None
            and slot.state is ChildState.RUNNING
            and (labels is None or slot.plan.label in labels)
        ]
        for slot in live:
            assert slot.process is not None
            slot.process.signal(signum)
        self._emit(
            "signal_forwarded",
            signal=signal.Signals(signum).name,
            children=[s.plan.label for s in live],
        )

    def restart(self, target: str, *, reason: str = "operator") -> list[str]:
        """Restart the child labelled ``target``, or every child of the spec ``target``.

        A running child gets SIGTERM and is replaced as soon as it exits; one waiting in
        backoff, given up or finished is started now. Returns the labels restarted; raises
        ConfigError for an unknown child or a stopping group.
        """
        if self.stopping or not self._started:
            raise ConfigError(f"the workgroup is {self._phase()}; nothing is restarted")
        slots = [s for s in self._slots if not s.retiring and target in (s.plan.label, s.plan.spec)]
        if not slots:
            known = ", ".join(s.plan.label for s in self._slots if not s.retiring)
            raise ConfigError(f"no child or spec {target!r} in this workgroup (children: {known})")
        now = self._clock.monotonic()
        for slot in slots:
            # The operator has looked at it: a fresh burst window, and not given up any more.
            self._given_up.discard(slot.plan.spec)
            slot.history = RestartHistory()
            self._emit("child_restart_requested", label=slot.plan.label, reason=reason)
            self._begin_restart(slot, now)
        self.wake()
        return [slot.plan.label for slot in slots]

    def reload(self) -> ReloadOutcome:
        """Read the file again and apply it; the group is left as it was if the file is bad.

        Changed children (command line, environment, health settings) are restarted, new ones
        started, removed ones stopped; the unchanged ones get SIGHUP so each worker re-reads
        its own settings. Restart and shutdown policies take effect at once.
        """
        if self._read_plan is None:
            raise ConfigError("this workgroup was started without a file to reload")
        if self.stopping or not self._started:
            raise ConfigError(f"the workgroup is {self._phase()}; nothing is reloaded")
        fresh = self._read_plan()
        check_reloadable(self.plan, fresh)
        self.plan = fresh  # its shutdown timeout already bounds the restarts below
        now = self._clock.monotonic()
        current = {slot.plan.label: slot for slot in self._slots if not slot.retiring}
        started: list[str] = []
        restarted: list[str] = []
        unchanged: list[str] = []
        slots: list[ChildSlot] = []
        for child in fresh.children:
            slot = current.pop(child.label, None)
            if slot is None:
                slot = ChildSlot(plan=child)
                self._spawn(slot, now)
                started.append(child.label)
            elif slot.plan != child:
                slot.plan, slot.history = child, RestartHistory()
                self._given_up.discard(child.spec)
                self._begin_restart(slot, now)
                restarted.append(child.label)
            else:
                unchanged.append(child.label)
            slots.append(slot)
        stopped = list(current)
        for slot in current.values():
            self._retire(slot, now)
            if slot.process is not None:
                slots.append(slot)  # tracked until it has exited
        self._slots = slots + [slot for slot in self._slots if slot.retiring and slot not in slots]
        self._given_up &= {child.spec for child in fresh.children}
        outcome = ReloadOutcome(
            started=tuple(started),
            restarted=tuple(restarted),
            stopped=tuple(stopped),
            unchanged=tuple(unchanged),
        )
        self._emit("workgroup_reloaded", file=str(fresh.file), **outcome.event_fields())
        if unchanged:
            self.forward_signal(signal.SIGHUP, unchanged)
        self.wake()
        return outcome

    def _phase(self) -> str:
        return "stopping" if self.stopping else "starting"

    def _begin_restart(self, slot: ChildSlot, now: float) -> None:
        if slot.process is None:
            self._spawn(slot, now)
            return
        slot.restart_requested = True
        ask_to_stop(slot, now, self.plan.shutdown_timeout)

    def _retire(self, slot: ChildSlot, now: float) -> None:
        slot.retiring, slot.restart_requested, slot.restart_at = True, False, None
        if slot.process is None:
            slot.state = ChildState.FINISHED
            return
        ask_to_stop(slot, now, self.plan.shutdown_timeout)

    def snapshot(self) -> list[ChildStatus]:
        """The current state of every child, in plan order."""
        now = self._clock.monotonic()
        return [child_status(slot, now) for slot in self._slots]

    # -- one pass -----------------------------------------------------------------------

    async def run_once(self) -> int | None:
        """Reap exits, restart what is due, health-check, enforce the stop deadline.

        Returns the group's exit code once it is done (and from then on), else None.
        """
        if self._exit_code is not None:
            return self._exit_code
        if not self._started:
            self._started = True
            self._emit(
                "workgroup_started",
                instance=self.plan.instance,
                file=str(self.plan.file),
                specs=self.plan.spec_names(),
                children=len(self._slots),
                runtime_dir=str(self.plan.runtime_dir),
                until_idle=self.plan.until_idle,
            )
            now = self._clock.monotonic()
            for slot in self._slots:
                if self.stopping:  # stopped before the first pass: spawn nothing
                    slot.state = ChildState.FINISHED
                else:
                    self._spawn(slot, now)
        self._reap()
        if self.stopping:
            self._enforce_stop_deadline()
        else:
            enforce_kill_deadlines(self._slots, self._clock, self.plan.shutdown_timeout, self._emit)
            self._restart_due()
            await self._check_health()
            self._reap()
        await self._exits.flush()
        self._exit_code = group_code(
            self._slots, stopping=self.stopping, until_idle=self.plan.until_idle, emit=self._emit
        )
        if self._exit_code is not None:
            self._emit("workgroup_stopped", exit_code=self._exit_code)
        return self._exit_code

    def next_deadline(self) -> float | None:
        """The monotonic time of the next timed action (restart, health check, stop)."""
        times = self._exits.deadlines()
        if self._stop_deadline is not None:
            if any(s.process is not None and not s.hard_killed for s in self._slots):
                times.append(self._stop_deadline)
            return min(times) if times else None
        for slot in self._slots:
            if slot.kill_at is not None and slot.process is not None and not slot.hard_killed:
                times.append(slot.kill_at)
            if slot.state is ChildState.BACKOFF and slot.restart_at is not None:
                times.append(slot.restart_at)
            elif is_watched(slot, self._health_source):
                times.append(slot.next_check_at)
        return min(times) if times else None

    def _emit(self, name: str, level: str = "info", **fields: Any) -> None:
        self._emit_event(SupervisorEvent(name=name, level=level, fields=fields))

    def _spawn(self, slot: ChildSlot, now: float) -> None:
        plan, previous_pid = slot.plan, slot.pid
        launch = next_launch(slot, self._base_env, self._output_dir)
        try:
            process = self._spawn_child(launch)
        except OSError as exc:
            self._emit(
                "child_spawn_failed", "error", label=plan.label, spec=plan.spec, error=str(exc)
            )
            slot.started_at = now
            self._after_exit(slot, EXIT_ERROR, pid=None, now=now)
            return
        slot.process, slot.pid, slot.state = process, process.pid, ChildState.RUNNING
        slot.started_at, slot.restart_at = now, None
        slot.watch, slot.last_seen_at = HeartbeatWatch.spawned(now), None
        slot.next_check_at = now + plan.health.check_interval
        if slot.spawned:
            slot.restarts += 1
            self._emit(
                "child_restarted",
                label=plan.label,
                spec=plan.spec,
                pid=process.pid,
                previous_pid=previous_pid,
                restarts=slot.restarts,
            )
        else:
            slot.spawned = True
            self._emit("child_started", label=plan.label, spec=plan.spec, pid=process.pid)

    def _reap(self) -> None:
        for slot in list(self._slots):
            if slot.process is None:
                continue
            code = slot.process.poll()
            if code is not None:
                pid = slot.process.pid
                slot.process = None
                self._exits.add(slot.plan.label, slot.worker_id, code)
                self._after_exit(slot, code, pid=pid, now=self._clock.monotonic())

    def _after_exit(self, slot: ChildSlot, code: int, *, pid: int | None, now: float) -> None:
        plan = slot.plan
        slot.last_exit_code = code
        uptime = now - slot.started_at
        common = exit_fields(slot, code, pid, uptime)
        stale, slot.stale_killed, slot.hard_killed = slot.stale_killed, False, False
        slot.kill_at = None
        if self.stopping:
            slot.state, slot.final_code = ChildState.FINISHED, code
            self._emit("child_exited", **common, reason="shutdown")
            return
        if slot.retiring:
            self._slots.remove(slot)
            self._emit("child_exited", **common, reason="removed")
            return
        if slot.restart_requested:
            slot.restart_requested = False
            self._emit("child_exited", **common, reason="restart_requested")
            self._spawn(slot, now)
            return
        if is_final_exit(code, until_idle=self.plan.until_idle):
            slot.state, slot.final_code = ChildState.FINISHED, code
            self._emit("child_exited", **common, reason="finished")
            return
        reason = "stale_killed" if stale else "exited"
        if plan.spec in self._given_up:
            slot.state, slot.final_code = ChildState.GIVEN_UP, code
            self._emit("child_exited", "warning", **common, reason=reason, restart=False)
            return
        decision = decide_restart(self.plan.restart, slot.history, now=now, uptime=uptime)
        slot.history = decision.history
        if decision.give_up:
            self._emit("child_exited", "warning", **common, reason=reason, restart=False)
            self._given_up.add(plan.spec)
            give_up(
                self._slots,
                slot,
                code,
                decision.exits_in_window,
                decision.young_in_a_row,
                self.plan.restart,
                self._emit,
            )
            return
        slot.state, slot.restart_at = ChildState.BACKOFF, now + decision.delay
        self._emit(
            "child_exited", "warning", **common, reason=reason, restart_in=round(decision.delay, 3)
        )

    def _restart_due(self) -> None:
        now = self._clock.monotonic()
        for slot in self._slots:
            due = slot.restart_at is not None and slot.restart_at <= now
            if slot.state is ChildState.BACKOFF and due:
                self._spawn(slot, now)

    async def _check_health(self) -> None:
        await check_health(
            self._slots,
            self._health_source,
            clock=self._clock,
            hostname=self._hostname,
            instance=self.plan.instance,
            emit=self._emit,
        )

    def _enforce_stop_deadline(self) -> None:
        assert self._stop_deadline is not None
        if self._clock.monotonic() < self._stop_deadline:
            return
        for slot in self._slots:
            if slot.process is not None and not slot.hard_killed:
                slot.hard_killed = True
                timeout = self.plan.shutdown_timeout
                kill(slot, self._emit, "warning", "shutdown_timeout", timeout=timeout)

    # -- the loop -----------------------------------------------------------------------

    async def run(self, *, install_signal_handlers: bool = True) -> int:
        """Run until the group is done; return its exit code.

        SIGTERM/SIGINT stop the group (repeat to escalate), SIGHUP reloads the file, SIGCHLD
        wakes the loop. An unexpected error stops the group gracefully; anything escaping
        (cancellation included) SIGKILLs the children so none is left orphaned.
        """
        handlers = signal_handlers(
            install_signal_handlers,
            on_stop=self._on_stop_signal,
            on_reload=self._on_reload_signal,
            on_child=self.wake,
        )
        try:
            with handlers:
                while True:
                    self._wake.clear()
                    try:
                        code = await self.run_once()
                    except Exception as exc:
                        if self.stopping:
                            raise
                        # One event with the traceback: the log must say where the pass failed.
                        self._emit("supervisor_error", "error", error=repr(exc), exc_info=exc)
                        self.request_stop("supervisor_error")
                        continue
                    if code is not None:
                        return code
                    await self._wake.sleep(self.next_deadline())
        finally:
            self._kill_survivors()

    def _on_stop_signal(self, signum: int) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _on_reload_signal(self) -> None:
        try:
            self.reload()
        except ConfigError as exc:
            self._emit("workgroup_reload_failed", "error", reason="SIGHUP", error=str(exc))

    def _kill_survivors(self) -> None:
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is None:
                kill(slot, self._emit, "error", "supervisor_exiting")
