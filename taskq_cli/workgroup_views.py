"""What ``taskq workgroup`` shows: the plan ``check`` prints (text or JSON) and the live table
of children ``start`` draws on a terminal.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.table import Table

from taskq_cli import output
from taskq_core.durations import format_duration
from taskq_core.supervisor.manager import WorkgroupManager
from taskq_core.supervisor.plan import ChildPlan, WorkgroupPlan
from taskq_core.supervisor.status import ChildState, ChildStatus


def _print(text: str = "") -> None:
    output.info(text)


def duration(value: float) -> str:
    """A duration in seconds as the workgroup commands print it ("1m30s")."""
    return format_duration(timedelta(seconds=value))


def plan_document(plan: WorkgroupPlan, actors: dict[str, tuple[str, ...]] | None) -> Any:
    """The plan as ``workgroup check --json`` prints it (with each spec's actors, if read)."""
    restart = plan.restart
    return {
        "file": str(plan.file),
        "runtime_dir": str(plan.runtime_dir),
        "shutdown_timeout": plan.shutdown_timeout,
        "restart": {
            "backoff_initial": restart.backoff_initial,
            "backoff_max": restart.backoff_max,
            "backoff_reset_after": restart.backoff_reset_after,
            "burst_limit": restart.burst_limit,
            "burst_window": restart.burst_window,
        },
        "children": [_child_document(child, actors) for child in plan.children],
    }


def _child_document(child: ChildPlan, actors: dict[str, tuple[str, ...]] | None) -> Any:
    document: dict[str, Any] = {
        "label": child.label,
        "spec": child.spec,
        "argv": list(child.argv),
        "command": child.command,
        "queues": list(child.queues),
        "concurrency": child.concurrency,
        "poll_interval": child.poll_interval,
        "health": {
            "enabled": child.health.enabled,
            "check_interval": child.health.check_interval,
            "stale_after": child.health.stale_after,
            "start_timeout": child.health.start_timeout,
        },
        "health_socket": str(child.health_socket),
        "env": child.shown_env(),
    }
    if actors is not None:
        document["actors"] = list(actors.get(child.spec, ()))
    return document


def print_plan(plan: WorkgroupPlan, actors: dict[str, tuple[str, ...]] | None) -> None:
    """The plan as ``workgroup check`` prints it for a reader."""
    restart = plan.restart
    specs = plan.spec_names()
    _print(f"workgroup {plan.file}: {len(plan.children)} children from {len(specs)} spec(s)")
    _print(f"  runtime dir  {plan.runtime_dir}")
    _print(f"  shutdown     SIGTERM, then SIGKILL after {duration(plan.shutdown_timeout)}")
    _print(
        f"  restarts     backoff {duration(restart.backoff_initial)} doubling to "
        f"{duration(restart.backoff_max)} (reset after {duration(restart.backoff_reset_after)} "
        f"up); a spec is given up after more than {restart.burst_limit} exits of one child "
        f"within {duration(restart.burst_window)}, or in a row after short runs"
    )
    for child in plan.children:
        health = child.health
        _print()
        _print(f"{child.label}  (spec {child.spec})")
        _print(f"  command      {child.command}")
        _print(
            f"  queues       {', '.join(child.queues)}  ·  concurrency {child.concurrency}  ·  "
            f"poll interval {duration(child.poll_interval)}"
        )
        if actors is not None:
            _print(f"  actors       {', '.join(actors.get(child.spec, ())) or '(none)'}")
        if health.enabled:
            _print(
                f"  health       check every {duration(health.check_interval)}, stale after "
                f"{duration(health.stale_after)}, start timeout {duration(health.start_timeout)}"
            )
        else:
            _print("  health       disabled")
        _print(f"  socket       {child.health_socket}")
        env = " ".join(f"{k}={v}" for k, v in child.shown_env().items())
        _print(f"  env          {env}")


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{max(0.0, seconds):.0f}s ago"


def _state(status: ChildStatus) -> str:
    colours = {
        ChildState.RUNNING: "green",
        ChildState.BACKOFF: "yellow",
        ChildState.STOPPING: "yellow",
        ChildState.GIVEN_UP: "bold red",
    }
    text = status.state.value
    if status.state is ChildState.BACKOFF and status.restart_in is not None:
        text += f" ({status.restart_in:.1f}s)"
    colour = colours.get(status.state)
    return f"[{colour}]{text}[/]" if colour else text


def children_table(manager: WorkgroupManager, *, output_dir: Path | None = None) -> Table:
    """The live view: one row per child (name, pid, uptime, restarts, last seen, exit)."""
    plan = manager.plan
    table = Table(
        title=f"workgroup {plan.file} · instance {plan.instance}",
        caption=(f"child output in {output_dir} · " if output_dir else "")
        + "Ctrl-C stops the group",
        header_style="bold",
    )
    for column in ("child", "spec", "state", "pid", "uptime", "restarts", "last seen", "exit"):
        table.add_column(column)
    for status in manager.snapshot():
        table.add_row(
            status.label,
            status.spec,
            _state(status),
            str(status.pid) if status.pid is not None else "-",
            duration(status.uptime) if status.uptime is not None else "-",
            str(status.restarts),
            _age(status.last_seen_ago),
            str(status.last_exit_code) if status.last_exit_code is not None else "-",
        )
    return table
