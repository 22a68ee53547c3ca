"""Contract conventions every operator command keeps: --help, --dsn/--schema after the
subcommand, --json on every listing and showing command, usage errors as exit 1."""

from __future__ import annotations

from typing import Any

import pytest

OPERATOR_COMMANDS = [
    ["enqueue"],
    ["jobs", "list"],
    ["jobs", "show"],
    ["jobs", "explain"],
    ["cancel"],
    ["retry"],
    ["queues", "list"],
    ["queues", "set-mode"],
    ["queues", "set-max-concurrent"],
    ["queues", "pause"],
    ["queues", "resume"],
    ["actor-config", "list"],
    ["actor-config", "get"],
    ["actor-config", "set"],
    ["actor-config", "diff"],
    ["workers", "list"],
    ["prune"],
    ["schedules", "list"],
    ["schedules", "show"],
    ["schedules", "add"],
    ["schedules", "enable"],
    ["schedules", "disable"],
    ["schedules", "delete"],
    ["schedules", "run"],
    ["workflows", "list"],
    ["workflows", "show"],
    ["workflows", "cancel"],
    ["workflows", "retry"],
]
LISTING_AND_SHOWING = [
    ["jobs", "list"],
    ["jobs", "show"],
    ["jobs", "explain"],
    ["queues", "list"],
    ["actor-config", "list"],
    ["actor-config", "get"],
    ["actor-config", "diff"],
    ["workers", "list"],
    ["prune"],
    ["schedules", "list"],
    ["schedules", "show"],
    ["workflows", "list"],
    ["workflows", "show"],
]


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_every_operator_command_has_help_and_takes_dsn_and_schema(
    taskq_cli: Any, command: list[str]
) -> None:
    result = taskq_cli(*command, "--help")
    assert result.exit_code == 0, result.stderr
    assert "--dsn" in result.stdout and "--schema" in result.stdout


@pytest.mark.parametrize("command", LISTING_AND_SHOWING, ids=" ".join)
def test_every_listing_and_showing_command_takes_json(taskq_cli: Any, command: list[str]) -> None:
    assert "--json" in taskq_cli(*command, "--help").stdout


@pytest.mark.parametrize(
    "group", ["jobs", "queues", "actor-config", "workers", "schedules", "workflows"]
)
def test_a_group_without_a_subcommand_prints_its_help(taskq_cli: Any, group: str) -> None:
    result = taskq_cli(group)
    assert result.exit_code == 0
    assert "Commands" in result.stdout


def test_an_unknown_option_is_a_one_line_usage_error_with_exit_1(taskq_cli: Any) -> None:
    result = taskq_cli("jobs", "list", "--colour")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "No such option: --colour" in result.stderr
