"""Start-up: ``taskq`` imports a command only when it is asked for.

Help, ``--version`` and the completion of command names load neither the library nor any
command module (they used to cost most of a second on every TAB); a sub-command loads its
own module alone. What each run imported is read from ``sys.modules`` in a fresh interpreter,
as harlequin's import-hygiene test does; the time it takes is a row of ``make bench``
(benchmarks/startup.py), not an assertion here.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import taskq_cli.commands
from taskq_cli.root import COMMANDS, app

# Heavy imports the start-up path must not pay for.
HEAVY = ("taskq_core", "taskq_cli.commands.", "asyncpg", "rich", "textual", "structlog")

_PROBE = """
import json, sys
from taskq_cli.app import run
try:
    code = run(sys.argv[1:])
except SystemExit as exc:  # shell completion answers and exits
    code = exc.code
sys.stdout = sys.__stdout__
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _imports(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """The exit code of ``taskq ARGS`` in a fresh interpreter and every module it imported."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "_TASKQ_"))}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        check=False,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["code"], report["modules"]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY) or m in ("rich", "textual")]


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--version"], []])
def test_help_and_version_load_no_command_and_not_the_library(args: list[str]) -> None:
    code, modules = _imports(*args)
    assert code == 0
    assert _heavy(modules) == []


def test_completing_a_command_name_loads_no_command() -> None:
    code, modules = _imports(
        env={"_TASKQ_COMPLETE": "complete_bash", "COMP_WORDS": "taskq j", "COMP_CWORD": "1"}
    )
    assert code == 0
    assert _heavy(modules) == []


def test_a_sub_command_loads_its_own_module_not_the_others() -> None:
    code, modules = _imports("jobs", "list", "--help")
    assert code == 0
    assert "taskq_cli.commands.jobs" in modules
    # Not the worker, supervisor or dashboard stacks of the other commands.
    others = ("worker", "workgroup", "top", "migrate", "embedded", "health", "prune")
    assert [m for m in modules if m.removeprefix("taskq_cli.commands.") in others] == []
    assert [m for m in modules if m.startswith(("textual", "taskq_core.supervisor"))] == []


def _loaded(name: str) -> Any:
    root: Any = typer.main.get_command(app)
    command = root.get_command(None, name)
    assert command is not None, name
    return command


@pytest.mark.parametrize("entry", COMMANDS, ids=[entry.name for entry in COMMANDS])
def test_each_summary_in_the_root_table_is_the_first_sentence_of_its_help(entry: Any) -> None:
    summary = _loaded(entry.name).get_short_help_str(limit=1000)
    assert entry.summary == summary, (
        f"taskq_cli/root.py COMMANDS: the summary of {entry.name!r} should read {summary!r}"
    )


def test_every_command_module_is_reachable_from_the_root() -> None:
    # A fresh interpreter: other tests here import command modules directly.
    loading = "import sys\nfrom taskq_cli.root import COMMANDS\n"
    loading += "for entry in COMMANDS: entry.load()\nprint(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", loading], capture_output=True, text=True, check=True
    ).stdout.split()
    modules = {
        f"taskq_cli.commands.{info.name}"
        for info in pkgutil.iter_modules([str(Path(taskq_cli.commands.__file__).parent)])
    }
    # A command module no entry loads (itself or through its group) is a command nobody
    # can run: it needs a line in the table.
    missing = sorted(modules - set(loaded))
    assert missing == [], f"not in taskq_cli/root.py COMMANDS: {missing}"


def test_the_root_lists_its_commands_in_table_order_from_the_summaries(taskq_cli: Any) -> None:
    result = taskq_cli("--help")
    assert result.exit_code == 0
    listed = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed if line.strip()] == [e.name for e in COMMANDS]
