"""docs/deploy.md names only what exists: settings, workgroup keys, commands and their options.

An operator copies these examples into units and manifests; a renamed setting or flag must
fail here, not in their production.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from taskq_cli.app import run
from taskq_core.settings import ENV_PREFIX, TaskqSettings
from taskq_core.supervisor.schema import load_workgroup

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)


def test_every_setting_it_names_is_a_taskq_setting() -> None:
    known = {ENV_PREFIX + name.upper() for name in TaskqSettings.model_fields}
    named = set(re.findall(r"\bTASKQ_[A-Z0-9_]+", DOC))
    assert named and named <= known, sorted(named - known)


def test_its_workgroup_file_validates(tmp_path: Path) -> None:
    (toml,) = _blocks("toml")
    path = tmp_path / "workgroup.toml"
    path.write_text(toml)
    config = load_workgroup(path)
    assert config.shutdown_timeout == 80.0
    assert config.runtime_dir == Path("/run/taskq")


def test_the_systemd_unit_outwaits_the_supervisors_shutdown_timeout() -> None:
    (unit,) = _blocks("ini")
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["KillMode"] == "mixed" and settings["KillSignal"] == "SIGTERM"
    assert float(settings["TimeoutStopSec"].removesuffix("s")) > 80
    assert settings["ExecReload"].split()[1:3] == ["workgroup", "reload"]


def _taskq_commands() -> list[list[str]]:
    """Every `taskq ...` command line of the shell examples, the probes and the unit."""
    lines = [line.split("#")[0].strip() for block in _blocks("bash") for line in block.splitlines()]
    commands = [shlex.split(line) for line in lines if line.startswith("taskq ")]
    for exec_list in re.findall(r'command: \[("taskq".*?)\]', DOC):
        commands.append([part.strip().strip('"') for part in exec_list.split(",")])
    for line in re.findall(r"^Exec\w+=(\S+/taskq .*)$", DOC, flags=re.MULTILINE):
        commands.append(["taskq", *shlex.split(line)[1:]])
    return commands


@pytest.mark.parametrize("command", _taskq_commands(), ids=" ".join)
def test_every_command_it_shows_parses(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The command's own --help: exit 0 only if every sub-command and option on the line exists.
    options = [part for part in command[1:] if part.startswith("--")]
    path = [part for part in command[1:] if not part.startswith("-")]
    assert run([*path[:2], "--help"]) == 0
    shown = capsys.readouterr().out
    for option in options:
        assert option in shown, f"{' '.join(command)}: no {option}"
