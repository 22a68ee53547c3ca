"""`taskq workgroup check|init|start` in-process: plans, starter files and one-line errors."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from taskq_cli.workgroup_views import children_table
from taskq_core.supervisor.children import ChildLaunch
from taskq_core.supervisor.manager import WorkgroupManager
from taskq_core.supervisor.plan import build_plan
from taskq_core.supervisor.schema import load_workgroup

GROUP = """\
actors = "tests.e2e.e2e_actors:registry"

[defaults]
max_concurrency = 3

[[workers]]
name = "main"
queues = ["default"]
processes = 2
env = { TASKQ_LOG_LEVEL = "WARNING", API_TOKEN = "hunter2" }

[[workers]]
name = "side"
queues = ["fair"]
poll_interval = "250ms"

[workers.health]
enabled = false
"""


def write(path: Path, text: str = GROUP) -> Path:
    path.write_text(text)
    return path


def test_check_prints_every_childs_command_line_and_settings(
    taskq_cli: Any, tmp_path: Path
) -> None:
    write(tmp_path / "group.toml")
    result = taskq_cli("workgroup", "check", "group.toml")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "group.toml: 3 children from 2 spec(s)" in out
    for label in ("main-1", "main-2", "side-1"):
        assert f"--label {label} --health-socket" in out
    assert "-m taskq_cli worker --actors tests.e2e.e2e_actors:registry --queues default" in out
    assert "concurrency 3" in out and "poll interval 250ms" in out
    assert "health       disabled" in out
    assert "API_TOKEN=***" in out and "hunter2" not in out
    assert "echo" in out  # the actors were imported


def test_check_json_is_one_document(taskq_cli: Any, tmp_path: Path) -> None:
    write(tmp_path / "group.toml")
    result = taskq_cli("workgroup", "check", "group.toml", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    children = document["children"]
    assert [c["label"] for c in children] == ["main-1", "main-2", "side-1"]
    assert children[0]["argv"][3:6] == ["worker", "--actors", "tests.e2e.e2e_actors:registry"]
    assert children[0]["env"]["TASKQ_WORKER_LABEL"] == "main-1"
    assert children[2]["health"]["enabled"] is False
    assert "echo" in children[0]["actors"]
    assert document["restart"]["burst_limit"] == 5


def test_check_of_an_invalid_file_is_one_error_line_naming_file_and_key(
    taskq_cli: Any, tmp_path: Path
) -> None:
    write(tmp_path / "group.toml", GROUP.replace("processes = 2", "processes = 0"))
    result = taskq_cli("workgroup", "check", "group.toml")
    assert result.exit_code == 1
    assert result.stderr == "error: group.toml: workers[0].processes: must be >= 1, got 0\n"
    assert "Traceback" not in result.stderr


def test_check_reports_actors_that_do_not_import(taskq_cli: Any, tmp_path: Path) -> None:
    write(tmp_path / "group.toml", GROUP.replace("tests.e2e.e2e_actors", "no_such_tq_module"))
    result = taskq_cli("workgroup", "check", "group.toml")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: group.toml: actors: ")
    assert "cannot import 'no_such_tq_module'" in result.stderr
    assert result.stderr.count("\n") == 1
    skipped = taskq_cli("workgroup", "check", "group.toml", "--no-import")
    assert skipped.exit_code == 0, skipped.stderr


def test_check_of_a_missing_file_fails_in_one_line(taskq_cli: Any) -> None:
    result = taskq_cli("workgroup", "check", "absent.toml")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: absent.toml: (file): cannot read")


def test_init_writes_a_starter_file_and_refuses_to_overwrite_it(
    taskq_cli: Any, tmp_path: Path
) -> None:
    first = taskq_cli("workgroup", "init")
    assert first.exit_code == 0, first.stderr
    written = (tmp_path / "workgroup.toml").read_text()
    assert written.startswith("# TaskQ workgroup")
    (tmp_path / "workgroup.toml").write_text("# mine\n")
    again = taskq_cli("workgroup", "init")
    assert again.exit_code == 1
    assert again.stderr == "error: workgroup.toml already exists; pass --force to overwrite it\n"
    assert (tmp_path / "workgroup.toml").read_text() == "# mine\n"
    forced = taskq_cli("workgroup", "init", "--force")
    assert forced.exit_code == 0
    assert (tmp_path / "workgroup.toml").read_text() == written


def test_the_starter_file_passes_check(taskq_cli: Any, tmp_path: Path) -> None:
    assert taskq_cli("workgroup", "init", "custom.toml").exit_code == 0
    result = taskq_cli("workgroup", "check", "custom.toml", "--no-import")
    assert result.exit_code == 0, result.stderr
    assert "api-1" in result.stdout and "media-1" in result.stdout


def test_start_rejects_an_invalid_file_before_starting_anything(
    taskq_cli: Any, tmp_path: Path
) -> None:
    write(tmp_path / "group.toml", GROUP + "bogus = 1\n")
    result = taskq_cli("workgroup", "start", "group.toml")
    assert result.exit_code == 1
    assert result.stderr == "error: group.toml: workers[1].health.bogus: unknown key\n"


def test_start_needs_until_idle_for_idle_max_runtime(taskq_cli: Any, tmp_path: Path) -> None:
    write(tmp_path / "group.toml")
    result = taskq_cli("workgroup", "start", "group.toml", "--idle-max-runtime", "5m")
    assert result.exit_code == 1
    assert result.stderr == "error: --idle-max-runtime needs --until-idle\n"


class _Child:
    def __init__(self, launch: ChildLaunch) -> None:
        self.pid = 4242

    def poll(self) -> int | None:
        return None

    def signal(self, signum: int) -> None:
        pass


async def test_the_live_table_shows_each_child(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path / "group.toml")), instance="inst-7")
    manager = WorkgroupManager(plan, spawn=_Child, emit=lambda event: None)
    await manager.run_once()
    console = Console(record=True, width=140)
    console.print(children_table(manager))
    text = console.export_text()
    assert "instance inst-7" in text
    for header in ("child", "pid", "uptime", "restarts", "last seen"):
        assert header in text
    assert text.count("4242") == 3 and "main-2" in text and "running" in text


# --- status, stop, reload, restart without a running group -----------------------------------


def test_controlling_a_group_that_is_not_running_fails_in_one_line(
    taskq_cli: Any, tmp_path: Path
) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="tqcli-", dir="/tmp"))
    try:
        write(tmp_path / "absent.toml", GROUP + f'[supervisor]\nruntime_dir = "{runtime}/none"\n')
        # A supervisor killed with SIGKILL leaves its socket behind: nobody listens on it.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
            left.bind(str(runtime / "control.sock"))
        write(tmp_path / "dead.toml", GROUP + f'[supervisor]\nruntime_dir = "{runtime}"\n')
        for command in (["status"], ["stop"], ["reload"], ["restart", "main-1"]):
            gone = taskq_cli("workgroup", command[0], "absent.toml", *command[1:])
            assert gone.exit_code == 1 and gone.stdout == ""
            assert gone.stderr == (
                f"error: no workgroup is running with runtime directory {runtime}/none "
                "(the directory does not exist)\n"
            )
            dead = taskq_cli("workgroup", command[0], "dead.toml", *command[1:])
            assert dead.exit_code == 1
            assert dead.stderr == (
                f"error: no workgroup is running with runtime directory {runtime} "
                f"(nothing listens on {runtime}/control.sock)\n"
            )
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


# --- a worker's unexpected error: the traceback in its own log ------------------------------


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_a_worker_whose_actors_raise_on_import_logs_one_event_with_the_traceback(
    taskq_cli: Any, tmp_path: Path, debug: bool
) -> None:
    (tmp_path / "exploding_actors.py").write_text(
        "raise RuntimeError('no config for the payment gateway')\n"
    )
    args = ["--debug"] if debug else []
    result = taskq_cli(
        *args,
        "worker",
        "--actors",
        "exploding_actors:registry",
        env={"TASKQ_LOG_FORMAT": "json", "TASKQ_PG_DSN": "postgresql://nobody@127.0.0.1:1/x"},
    )
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()  # one event, nothing else
    event = json.loads(line)
    assert event["event"] == "worker_crashed" and event["component"] == "worker"
    assert event["error"] == "RuntimeError: no config for the payment gateway"
    assert event["actors"] == "exploding_actors:registry"
    assert "exploding_actors.py" in event["exception"]
    assert event["exception"].startswith("Traceback (most recent call last):")
