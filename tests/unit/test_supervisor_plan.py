"""The workgroup plan: labelled children, their command lines and sockets; the actors check."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskq_core.supervisor.diagnostics import WorkgroupConfigError
from taskq_core.supervisor.plan import (
    INSTANCE_PLACEHOLDER,
    MAX_SOCKET_PATH,
    build_plan,
    check_actors,
    default_runtime_dir,
)
from taskq_core.supervisor.schema import load_workgroup
from tests.unit.workgroup_files import (
    MINIMAL,
    VALID,
    clean_environment,  # noqa: F401 (autouse fixture)
    write,
)


def test_processes_expand_into_labelled_children_with_their_own_sockets(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), instance="inst-1")
    assert [c.label for c in plan.children] == ["api-1", "api-2", "media-1"]
    sockets = {c.health_socket for c in plan.children}
    assert len(sockets) == 3
    assert all(s.parent == plan.runtime_dir and s.name.endswith(".sock") for s in sockets)
    for child in plan.children:
        assert child.env["TASKQ_WORKER_LABEL"] == child.label
        assert child.env["TASKQ_WORKGROUP_INSTANCE"] == "inst-1"


def test_each_child_runs_taskq_worker_with_the_spec_as_flags(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), python="python3")
    api = plan.children[0]
    assert list(api.argv) == [
        "python3", "-m", "taskq_cli", "worker", "--actors", "myapp.actors:registry",
        "--queues", "default", "--queues", "urgent", "--concurrency", "8",
        "--poll-interval", "2s", "--label", "api-1", "--health-socket", str(api.health_socket),
    ]  # fmt: skip
    assert api.command.startswith("python3 -m taskq_cli worker --actors myapp.actors:registry")
    assert api.env["TASKQ_WORKGROUP_INSTANCE"] == INSTANCE_PLACEHOLDER


def test_until_idle_is_passed_to_every_child(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), until_idle=True, idle_max_runtime=90)
    assert plan.until_idle
    for child in plan.children:
        assert child.argv[-3:] == ("--until-idle", "--idle-max-runtime", "90s")


def test_unset_keys_leave_the_worker_settings_in_charge(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, MINIMAL)))
    (child,) = plan.children
    assert "--concurrency" not in child.argv and "--poll-interval" not in child.argv
    assert (child.concurrency, child.poll_interval) == (8, 1.0)  # the TaskqSettings defaults


def test_the_shutdown_timeout_outwaits_the_childrens_own_grace_period(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)))
    assert plan.shutdown_timeout == 75.0 + 5.0
    text = MINIMAL + '[supervisor]\nshutdown_timeout = "12s"\n'
    assert build_plan(load_workgroup(write(tmp_path, text))).shutdown_timeout == 12.0


def test_the_default_runtime_dir_is_stable_per_file_and_short(tmp_path: Path) -> None:
    first = default_runtime_dir(write(tmp_path, MINIMAL, "a.toml"))
    assert first == default_runtime_dir(tmp_path / "a.toml")
    assert first != default_runtime_dir(write(tmp_path, MINIMAL, "b.toml"))
    assert len(str(first / "some-worker-name-12.sock")) < MAX_SOCKET_PATH


def test_secret_looking_env_values_are_masked_when_shown(tmp_path: Path) -> None:
    text = MINIMAL + 'env = { API_TOKEN = "hunter2", REGION = "eu" }\n'
    (child,) = build_plan(load_workgroup(write(tmp_path, text))).children
    shown = child.shown_env()
    assert shown["API_TOKEN"] == "***" and shown["REGION"] == "eu"
    assert child.env["API_TOKEN"] == "hunter2"


def test_check_actors_reports_an_import_failure_at_its_key(tmp_path: Path) -> None:
    text = MINIMAL.replace("a.b:registry", "tests.e2e.e2e_actors:registry") + (
        '[[workers]]\nname = "x"\nqueues = ["q"]\nactors = "no_such_module_for_tq:registry"\n'
    )
    config = load_workgroup(write(tmp_path, text))
    with pytest.raises(WorkgroupConfigError) as caught:
        check_actors(config)
    assert caught.value.key == "workers[1].actors"
    assert "cannot import 'no_such_module_for_tq'" in caught.value.reason


def test_check_actors_warns_about_actors_no_spec_consumes(tmp_path: Path) -> None:
    text = MINIMAL.replace("a.b:registry", "tests.e2e.e2e_actors:registry").replace(
        '["q"]', '["default"]'
    )
    report = check_actors(load_workgroup(write(tmp_path, text)))
    assert "echo" in report.actors["w"]
    assert any(w.startswith("actor 'fair'") and "queue 'fair'" in w for w in report.warnings)
