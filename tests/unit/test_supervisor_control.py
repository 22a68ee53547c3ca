"""Operator control of a running group: restart one child, reload the file, the control socket.

The manager is replayed with fake children and a fake clock (the Harness of
``test_supervisor_manager``); the control socket is served for real on a Unix socket and
driven by the same ``send_command`` the CLI uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskq_core.errors import ConfigError
from taskq_core.supervisor.control import (
    ControlCommandError,
    ControlServer,
    WorkgroupNotRunningError,
    control_socket,
    send_command,
)
from taskq_core.supervisor.diagnostics import WorkgroupConfigError
from taskq_core.supervisor.plan import WorkgroupPlan
from taskq_core.supervisor.policy import RestartPolicy
from taskq_core.supervisor.status import ChildState
from tests.unit.test_supervisor_manager import Harness, make_plan

# --- restart one child ------------------------------------------------------------------------


async def test_a_restarted_child_gets_sigterm_and_a_new_pid_as_soon_as_it_exits() -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    await harness.step()
    old = harness.child("api-1")
    old.exits_on_sigterm = False  # it takes its time to drain
    assert harness.manager.restart("api-1") == ["api-1"]
    assert old.signals == [signal.SIGTERM, signal.SIGCONT]
    assert harness.state("api-1") is ChildState.STOPPING
    old.exit(0)
    await harness.step(0.01)  # no backoff: replaced in the pass that reaps it
    new = harness.child("api-1")
    assert new is not old and harness.state("api-1") is ChildState.RUNNING
    (exited,) = harness.of("child_exited")
    assert exited["reason"] == "restart_requested" and exited["pid"] == old.pid
    (restarted,) = harness.of("child_restarted")
    assert restarted["previous_pid"] == old.pid and restarted["pid"] == new.pid
    assert harness.child("api-2").signals == []


async def test_operator_restarts_do_not_count_towards_the_burst_limit() -> None:
    plan = make_plan({"api": 1}, restart=RestartPolicy(burst_limit=1, burst_window=60.0))
    harness = Harness(plan, health=False)
    await harness.step()
    for _ in range(5):
        harness.manager.restart("api")
        await harness.step(0.01)
    assert "spec_given_up" not in harness.names()
    assert harness.manager.snapshot()[0].restarts == 5
    assert harness.state("api-1") is ChildState.RUNNING


async def test_a_restarted_child_ignoring_sigterm_is_sigkilled_after_the_shutdown_timeout() -> None:
    harness = Harness(make_plan({"api": 1}, shutdown_timeout=10.0), health=False)
    harness.exits_on_sigterm = False
    await harness.step()
    old = harness.child("api-1")
    harness.manager.restart("api-1")
    assert harness.manager.next_deadline() == pytest.approx(harness.clock.monotonic() + 10.0)
    await harness.step(9.9)
    assert "child_killed" not in harness.names()
    await harness.step(0.1)
    (killed,) = harness.of("child_killed")
    assert killed["reason"] == "restart_timeout" and old.signals[-1] == signal.SIGKILL
    await harness.step(0.01)
    assert harness.child("api-1") is not old
    assert harness.state("api-1") is ChildState.RUNNING


async def test_a_spec_name_restarts_every_child_of_it_and_an_unknown_name_is_refused() -> None:
    harness = Harness(make_plan({"api": 2, "media": 1}), health=False)
    await harness.step()
    assert harness.manager.restart("api") == ["api-1", "api-2"]
    assert harness.child("media-1").signals == []
    with pytest.raises(ConfigError, match=r"no child or spec 'nope'.*api-1, api-2, media-1"):
        harness.manager.restart("nope")


async def test_restarting_a_given_up_child_starts_it_again() -> None:
    plan = make_plan({"api": 1, "broken": 1}, restart=RestartPolicy(burst_limit=0))
    harness = Harness(plan, health=False)
    await harness.step()
    harness.child("broken-1").exit(1)
    await harness.step(0.1)
    assert harness.state("broken-1") is ChildState.GIVEN_UP
    harness.manager.restart("broken-1")
    assert harness.state("broken-1") is ChildState.RUNNING
    assert harness.of("child_restarted")[0]["label"] == "broken-1"


async def test_a_stopping_group_refuses_restarts() -> None:
    harness = Harness(make_plan({"api": 1}), health=False)
    await harness.step()
    harness.manager.request_stop("SIGTERM")
    with pytest.raises(ConfigError, match="stopping"):
        harness.manager.restart("api-1")


# --- reload ----------------------------------------------------------------------------------


def _with_env(plan: WorkgroupPlan, label: str, **env: str) -> WorkgroupPlan:
    children = tuple(
        dataclasses.replace(c, env={**c.env, **env}) if c.label == label else c
        for c in plan.children
    )
    return dataclasses.replace(plan, children=children)


async def test_a_reload_starts_new_children_stops_removed_ones_and_restarts_changed_ones() -> None:
    plans = [make_plan({"api": 2, "old": 1})]
    harness = Harness(plans[0], health=False, read_plan=lambda: plans[-1])
    await harness.step()
    before = {label: harness.child(label) for label in ("api-1", "api-2", "old-1")}
    plans.append(_with_env(make_plan({"api": 2, "media": 1}), "api-2", TASKQ_LOG_LEVEL="DEBUG"))

    outcome = harness.manager.reload()

    assert outcome.started == ("media-1",)
    assert outcome.restarted == ("api-2",)
    assert outcome.stopped == ("old-1",)
    assert outcome.unchanged == ("api-1",)
    assert before["api-1"].signals == [signal.SIGHUP]  # re-reads its own settings
    assert before["api-2"].returncode == 0 and before["old-1"].returncode == 0  # SIGTERMed
    await harness.step(0.01)
    assert harness.child("api-2") is not before["api-2"]
    assert harness.child("api-2").launch.env["TASKQ_LOG_LEVEL"] == "DEBUG"
    assert [s.label for s in harness.manager.snapshot()] == ["api-1", "api-2", "media-1"]
    reasons = {e["label"]: e["reason"] for e in harness.of("child_exited")}
    assert reasons == {"api-2": "restart_requested", "old-1": "removed"}
    assert harness.of("workgroup_reloaded")[0]["started"] == ("media-1",)


async def test_a_removed_child_that_ignores_sigterm_is_sigkilled_then_forgotten() -> None:
    plans = [make_plan({"api": 1, "old": 1}, shutdown_timeout=5.0)]
    harness = Harness(plans[0], health=False, read_plan=lambda: plans[-1])
    harness.exits_on_sigterm = False
    await harness.step()
    plans.append(make_plan({"api": 1}, shutdown_timeout=5.0))
    harness.manager.reload()
    await harness.step(5.0)
    assert harness.of("child_killed")[0]["reason"] == "removed_timeout"
    await harness.step(0.01)
    assert [s.label for s in harness.manager.snapshot()] == ["api-1"]


async def test_a_file_that_no_longer_validates_changes_nothing() -> None:
    def broken() -> WorkgroupPlan:
        raise WorkgroupConfigError("group.toml", "workers[0].queues", "expected a list")

    harness = Harness(make_plan({"api": 1}), health=False, read_plan=broken)
    await harness.step()
    with pytest.raises(ConfigError, match=r"workers\[0\]\.queues"):
        harness.manager.reload()
    assert harness.child("api-1").signals == []
    assert "workgroup_reloaded" not in harness.names()


async def test_a_reload_that_moves_the_runtime_dir_is_refused() -> None:
    moved = dataclasses.replace(make_plan({"api": 1}), runtime_dir=Path("/elsewhere"))
    harness = Harness(make_plan({"api": 1}), health=False, read_plan=lambda: moved)
    await harness.step()
    with pytest.raises(ConfigError, match="runtime_dir changed"):
        harness.manager.reload()


# --- the control socket ----------------------------------------------------------------------


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    # A short path: a Unix socket path holds at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="tqctl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_the_control_socket_answers_status_restart_and_stop(runtime_dir: Path) -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    await harness.step()
    server = ControlServer(harness.manager, runtime_dir)
    await server.start()
    try:
        status = await asyncio.to_thread(send_command, runtime_dir, "status")
        assert [(c["label"], c["state"], c["pid"]) for c in status["children"]] == [
            ("api-1", "running", harness.child("api-1").pid),
            ("api-2", "running", harness.child("api-2").pid),
        ]
        assert status["instance"] == harness.manager.plan.instance

        answer = await asyncio.to_thread(send_command, runtime_dir, "restart", child="api-2")
        assert answer["restarted"] == ["api-2"]
        with pytest.raises(ControlCommandError, match="no child or spec 'api-9'"):
            await asyncio.to_thread(send_command, runtime_dir, "restart", child="api-9")
        with pytest.raises(ControlCommandError, match="without a file to reload"):
            await asyncio.to_thread(send_command, runtime_dir, "reload")

        answer = await asyncio.to_thread(send_command, runtime_dir, "stop")
        assert answer["asked_to_stop"] == ["api-1", "api-2"] and harness.manager.stopping
    finally:
        await server.close()
    assert not control_socket(runtime_dir).exists()
    with pytest.raises(WorkgroupNotRunningError, match="nothing listens on"):
        send_command(runtime_dir, "status")


def test_no_directory_or_a_socket_left_by_a_killed_supervisor_means_not_running(
    runtime_dir: Path,
) -> None:
    with pytest.raises(WorkgroupNotRunningError, match="does not exist"):
        send_command(runtime_dir / "gone", "status")
    # A killed supervisor leaves its socket file behind, with nobody listening on it.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(control_socket(runtime_dir)))
    with pytest.raises(WorkgroupNotRunningError, match="no workgroup is running"):
        send_command(runtime_dir, "status")
