"""One child slot of a workgroup (``api-1`` ...): its state, process and restart history.

The manager owns the slots and moves them through their states; this module holds what a
slot is and the few things done to one alone: the launch of its next process (under a new
worker id), its status for readers, a graceful stop (SIGTERM, then SIGCONT so a stopped child
acts on it) and a SIGKILL with its event.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from taskq_core.clock import Clock
from taskq_core.ids import uuid7
from taskq_core.supervisor.children import ChildLaunch, ChildProcess
from taskq_core.supervisor.plan import ChildPlan
from taskq_core.supervisor.policy import HeartbeatWatch, RestartHistory
from taskq_core.supervisor.status import ChildState, ChildStatus

# The manager's event emitter: (name, level="info", **fields).
Emit = Callable[..., None]


@dataclass
class ChildSlot:
    """A child of the plan and the process that currently serves it, if any."""

    plan: ChildPlan
    state: ChildState = ChildState.PENDING
    process: ChildProcess | None = None
    pid: int | None = None
    worker_id: UUID | None = None  # the id the current (or last) process registers under
    started_at: float = 0.0
    spawned: bool = False
    restarts: int = 0
    restart_at: float | None = None
    history: RestartHistory = field(default_factory=RestartHistory)
    watch: HeartbeatWatch = field(default_factory=lambda: HeartbeatWatch.spawned(0.0))
    next_check_at: float = 0.0
    last_seen_at: datetime | None = None
    last_exit_code: int | None = None
    final_code: int | None = None
    stale_killed: bool = False
    hard_killed: bool = False
    # An operator's restart or a reload: respawn at once on exit (or, retiring, drop the slot).
    restart_requested: bool = False
    retiring: bool = False
    kill_at: float | None = None  # SIGKILL if the child asked to stop is still alive then


def next_launch(
    slot: ChildSlot, base_env: Mapping[str, str], output_dir: Path | None
) -> ChildLaunch:
    """The launch of the slot's next process, under a new worker id (``TASKQ_WORKER_ID``, the
    id of its ``workers`` row) that the slot keeps: the row to mark when it exits."""
    plan = slot.plan
    slot.worker_id = uuid7()
    env = {**base_env, **plan.env, "TASKQ_WORKER_ID": str(slot.worker_id)}
    output = output_dir / f"{plan.label}.log" if output_dir else None
    return ChildLaunch(label=plan.label, argv=plan.argv, env=env, output=output)


def child_status(slot: ChildSlot, now: float) -> ChildStatus:
    """The slot as ``workgroup status`` shows it."""
    return ChildStatus(
        label=slot.plan.label,
        spec=slot.plan.spec,
        state=slot.state,
        pid=slot.process.pid if slot.process is not None else None,
        uptime=now - slot.started_at if slot.process is not None else None,
        restarts=slot.restarts,
        last_seen_at=slot.last_seen_at,
        last_seen_ago=(now - slot.watch.moved_at if slot.watch.last_seen_at is not None else None),
        last_exit_code=slot.last_exit_code,
        restart_in=(max(0.0, slot.restart_at - now) if slot.restart_at is not None else None),
    )


def ask_to_stop(slot: ChildSlot, now: float, timeout: float) -> None:
    """SIGTERM the slot's child; SIGKILL is due ``timeout`` later if it is still alive."""
    assert slot.process is not None
    slot.state, slot.kill_at = ChildState.STOPPING, now + timeout
    slot.process.signal(signal.SIGTERM)
    slot.process.signal(signal.SIGCONT)


def kill(slot: ChildSlot, emit: Emit, level: str, reason: str, **fields: Any) -> None:
    """SIGKILL the slot's child, saying why (``child_killed``)."""
    assert slot.process is not None
    emit(
        "child_killed",
        level,
        label=slot.plan.label,
        spec=slot.plan.spec,
        pid=slot.process.pid,
        reason=reason,
        **fields,
    )
    slot.process.signal(signal.SIGKILL)


def enforce_kill_deadlines(
    slots: list[ChildSlot], clock: Clock, timeout: float, emit: Emit
) -> None:
    """SIGKILL each child asked to stop (restart, removal) that outlived the shutdown timeout."""
    now = clock.monotonic()
    for slot in slots:
        due = slot.kill_at is not None and slot.kill_at <= now
        if due and slot.process is not None and not slot.hard_killed:
            slot.hard_killed = True
            reason = "restart_timeout" if slot.restart_requested else "removed_timeout"
            kill(slot, emit, "warning", reason, timeout=timeout)
