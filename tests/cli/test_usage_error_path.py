"""The root command's error path over typer's public exceptions: help is not an error, and a
usage error is one line that names the command whose ``--help`` explains it."""

from __future__ import annotations

from typing import Any


def test_taskq_without_arguments_prints_its_help_and_exits_0(taskq_cli: Any) -> None:
    result = taskq_cli()
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: taskq [OPTIONS] COMMAND [ARGS]...")
    assert "Commands" in result.stdout
    assert result.stderr == ""


def test_a_usage_error_names_the_help_of_its_command(taskq_cli: Any) -> None:
    result = taskq_cli("jobs", "show")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == "error: Missing argument 'ID'. (see 'taskq jobs show --help')\n"


def test_an_unknown_command_is_a_usage_error_of_the_root(taskq_cli: Any) -> None:
    result = taskq_cli("jobz")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: No such command 'jobz'.")
    assert result.stderr.endswith("(see 'taskq --help')\n")


def test_dash_h_is_help_on_the_root_and_on_every_command(taskq_cli: Any) -> None:
    # `queues set-max-concurrent` takes unknown options as values (-1); -h is still help.
    for command in ([], ["jobs"], ["jobs", "show"], ["queues", "set-max-concurrent", "q"]):
        short = taskq_cli(*command, "-h")
        assert short.exit_code == 0, short.stderr
        assert short.stdout == taskq_cli(*command, "--help").stdout
        assert "-h, --help" in short.stdout
        assert short.stderr == ""


def test_a_mistyped_command_suggests_the_close_names_of_commands_not_loaded_yet(
    taskq_cli: Any,
) -> None:
    result = taskq_cli("jbos", "list")
    assert result.exit_code == 1
    assert (
        result.stderr
        == "error: No such command 'jbos'. Did you mean 'jobs'? (see 'taskq --help')\n"
    )
