"""``taskq top`` as a command: its options, and the one-line errors it gives before the
screen opens (bad options, unreachable or unmigrated database, no terminal)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cli.conftest import one_error_line
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres


def test_top_has_help_with_refresh_dsn_and_schema(taskq_cli: Any) -> None:
    result = taskq_cli("top", "--help")
    assert result.exit_code == 0, result.stderr
    for option in ("--refresh", "--timeout", "--dsn", "--schema"):
        assert option in result.stdout


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_refresh_is_a_one_line_usage_error(taskq_cli: Any, value: str) -> None:
    assert "--refresh" in one_error_line(taskq_cli("top", "--refresh", value))


def test_an_unreachable_database_fails_before_the_screen_opens(taskq_cli: Any) -> None:
    line = one_error_line(taskq_cli("top", "--dsn", "postgresql://taskq:taskq@127.0.0.1:9/taskq"))
    assert "cannot connect to PostgreSQL at 127.0.0.1:9/taskq" in line


def test_an_unmigrated_schema_fails_with_the_fix(cli: Callable[..., CliResult]) -> None:
    line = one_error_line(cli("top", "--schema", "nothing_here"))
    assert "'nothing_here'" in line and "taskq migrate up" in line


def test_without_a_terminal_top_says_so(cli: Callable[..., CliResult]) -> None:
    line = one_error_line(cli("top"))
    assert line == "error: taskq top needs a terminal (stdin and stdout are not a TTY)"
