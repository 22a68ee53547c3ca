"""What a child's exit means beyond its own slot: its event fields, its spec given up, the
group's exit code.

The manager decides per exit (``policy.decide_restart``); this module applies a give-up to
every slot of the spec and says when the whole group is done: after a stop, once an
until-idle group drained (the worst child's code, ``policy.group_exit_code``), or once every
spec was given up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskq_core.constants import EXIT_ERROR, EXIT_OK
from taskq_core.supervisor.policy import (
    RestartPolicy,
    describe_exit,
    exit_signal,
    group_exit_code,
)
from taskq_core.supervisor.slots import ChildSlot, Emit
from taskq_core.supervisor.status import ChildState


def exit_fields(slot: ChildSlot, code: int, pid: int | None, uptime: float) -> dict[str, Any]:
    """The fields every ``child_exited`` event carries."""
    plan = slot.plan
    return {
        "label": plan.label,
        "spec": plan.spec,
        "pid": pid,
        "worker_id": None if slot.worker_id is None else str(slot.worker_id),
        "exit_code": code,
        "outcome": describe_exit(code),
        "signal": exit_signal(code),
        "uptime": round(uptime, 3),
    }


def give_up(
    slots: Sequence[ChildSlot],
    trigger: ChildSlot,
    code: int,
    exits: int,
    young_in_a_row: int,
    policy: RestartPolicy,
    emit: Emit,
) -> None:
    """The trigger's spec went past its burst limit: its slots not running are given up (its
    running children keep serving)."""
    spec = trigger.plan.spec
    still_running = []
    for slot in slots:
        if slot.plan.spec != spec:
            continue
        if slot.process is not None:
            still_running.append(slot.plan.label)
        elif slot.state in (ChildState.PENDING, ChildState.BACKOFF) or slot is trigger:
            slot.state, slot.restart_at = ChildState.GIVEN_UP, None
            slot.final_code = slot.last_exit_code if slot.last_exit_code is not None else code
    # Log fields, alike memory/schedules.py's _job_of and worker/runtime.py's _build_deps by
    # shape only: keyword arguments, other data.
    emit(
        "spec_given_up",
        "error",
        spec=spec,
        label=trigger.plan.label,
        exits=exits,
        young_exits_in_a_row=young_in_a_row,
        burst_limit=policy.burst_limit,
        burst_window=policy.burst_window,
        last_exit_code=code,
        still_running=still_running,
    )


def group_code(
    slots: Sequence[ChildSlot], *, stopping: bool, until_idle: bool, emit: Emit
) -> int | None:
    """The group's exit code once no child runs and it is done, else None."""
    if any(slot.process is not None for slot in slots):
        return None
    if stopping:
        return EXIT_OK
    final = (ChildState.FINISHED, ChildState.GIVEN_UP)
    if until_idle and all(slot.state in final for slot in slots):
        codes = [slot.final_code if slot.final_code is not None else EXIT_ERROR for slot in slots]
        code = group_exit_code(codes)
        emit(
            "workgroup_drained",
            exit_code=code,
            children={slot.plan.label: slot.final_code for slot in slots},
        )
        return code
    if all(slot.state is ChildState.GIVEN_UP for slot in slots):
        emit("workgroup_failed", "error", reason="every spec was given up")
        return EXIT_ERROR
    return None
