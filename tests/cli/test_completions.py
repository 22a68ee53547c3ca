"""completions/: the committed scripts match what the CLI generates, and they complete.

The drift check regenerates each script in a subprocess exactly as typer's own tests do
(``--show-completion SHELL`` with shell detection disabled). The scripts call back into
``taskq`` at TAB time, so the bash one is also driven for real to show it offers the
command groups, their subcommands, the value lists of the current CLI, and the queue and
actor names of the database the command would use (nothing when that database is absent,
unmigrated or does not answer).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from taskq_cli import completion
from taskq_cli.root import app
from taskq_core.backend.postgres.connection import CONNECT_TIMEOUT
from tests.cli.conftest import Db
from tests.conftest import TASKQ_BIN, PgTarget

ROOT = Path(__file__).resolve().parents[2]
SHELLS = ("bash", "zsh", "fish")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "_TASKQ_"))}
    env["PATH"] = f"{Path(TASKQ_BIN).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@pytest.mark.parametrize("shell", SHELLS)
def test_the_committed_script_matches_the_cli(shell: str) -> None:
    generated = subprocess.run(
        [TASKQ_BIN, "--show-completion", shell],
        capture_output=True,
        text=True,
        env=_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"),
        check=True,
    ).stdout
    committed = (ROOT / "completions" / f"taskq.{shell}").read_text()
    assert committed == generated, f"completions/taskq.{shell} drifted: run `make completions`"


def test_the_generator_check_mode_agrees() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_completions.py"), "--check"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr


def _bash_complete(*words: str, env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY after sourcing completions/taskq.bash and pressing TAB after ``words``."""
    script = ROOT / "completions" / "taskq.bash"
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        f"source '{script}'; COMP_WORDS=(taskq {quoted}); COMP_CWORD={len(words)}; "
        '_taskq_completion taskq; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        env=_env(**(env or {})),
        check=True,
        # A guard against a hang, not a measure: a completion waiting on a silent server
        # would otherwise sit out the library's connect timeout.
        timeout=CONNECT_TIMEOUT,
    )
    assert result.stderr == "", result.stderr
    return result.stdout.split()


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@needs_bash
def test_bash_completion_offers_the_operator_commands() -> None:
    top = _bash_complete("")
    for command in ("enqueue", "jobs", "cancel", "retry", "queues", "actor-config", "workers"):
        assert command in top
    assert {"list", "show", "explain"} <= set(_bash_complete("jobs", ""))
    assert "set-max-concurrent" in _bash_complete("queues", "")
    assert _bash_complete("queues", "set-mode", "media", "") == ["strict_fifo", "round_robin"]
    assert "failed" in _bash_complete("jobs", "list", "--status", "")
    assert _bash_complete("actor-config", "set", "x", "--clear-max-c") == ["--clear-max-concurrent"]


def _target(pg: PgTarget) -> dict[str, str]:
    return {"TASKQ_PG_DSN": pg.dsn, "TASKQ_SCHEMA_NAME": pg.schema}


@pytest.fixture
def known_names(db: Db) -> Db:
    """Two registered actors on two queues, a configured queue without actors, and a queue
    that only has jobs (an actor no worker registered)."""
    db.register_actor("resize", queue="media")
    db.register_actor("send_mail", queue="mail")
    db.sql("INSERT INTO {schema}.queues (name) VALUES ('reports')")
    db.enqueue("adhoc_export", queue="exports")
    return db


@needs_bash
def test_queue_arguments_and_options_complete_the_queues_of_the_database(
    known_names: Db, pg: PgTarget
) -> None:
    queues = ["exports", "mail", "media", "reports"]
    env = _target(pg)
    assert _bash_complete("queues", "pause", "", env=env) == queues
    assert _bash_complete("queues", "set-max-concurrent", "m", env=env) == ["mail", "media"]
    assert _bash_complete("jobs", "list", "--queue", "", env=env) == queues
    assert _bash_complete("worker", "--actors", "app:registry", "--queues", "r", env=env) == [
        "reports"
    ]
    assert _bash_complete("cancel", "--queue", "ex", env=env) == ["exports"]
    assert _bash_complete("jobs", "move", "--queue", "media", "--to", "", env=env) == queues


@needs_bash
def test_actor_arguments_and_options_complete_the_registered_actors(
    known_names: Db, pg: PgTarget
) -> None:
    env = _target(pg)
    assert _bash_complete("enqueue", "", env=env) == ["resize", "send_mail"]
    assert _bash_complete("actor-config", "get", "s", env=env) == ["send_mail"]
    assert _bash_complete("jobs", "list", "--actor", "", env=env) == ["resize", "send_mail"]
    assert _bash_complete("retry", "--status", "failed", "--actor", "r", env=env) == ["resize"]


@needs_bash
def test_completion_asks_the_database_named_on_the_command_line(
    known_names: Db, pg: PgTarget
) -> None:
    elsewhere = {"TASKQ_PG_DSN": pg.dsn, "TASKQ_SCHEMA_NAME": "no_such_schema"}
    assert _bash_complete("queues", "resume", "", env=elsewhere) == []
    on_root = _bash_complete("--schema", pg.schema, "queues", "resume", "", env=elsewhere)
    assert on_root == ["exports", "mail", "media", "reports"]
    on_command = _bash_complete("enqueue", "--schema", pg.schema, "", env=elsewhere)
    assert on_command == ["resize", "send_mail"]


@needs_bash
def test_an_unreachable_or_unmigrated_database_offers_nothing_and_says_nothing(
    pg: PgTarget, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = {"TASKQ_PG_DSN": f"postgresql://taskq@127.0.0.1:{port}/taskq"}
    assert _bash_complete("queues", "pause", "", env=refused) == []
    unmigrated = {"TASKQ_PG_DSN": pg.dsn, "TASKQ_SCHEMA_NAME": "not_migrated_here"}
    assert _bash_complete("enqueue", "", env=unmigrated) == []
    # A stopped or missing embedded database is not started (or created) to complete a name.
    missing = tmp_path / "pgdata"
    assert _bash_complete("enqueue", "", env={"TASKQ_PG_DSN": f"embedded:{missing}"}) == []
    assert not missing.exists()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The DSN of a TCP server that takes connections and never answers (a hung database)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel completes the handshakes; nothing ever replies
        yield f"postgresql://taskq@127.0.0.1:{server.getsockname()[1]}/taskq"


@needs_bash
def test_a_database_that_does_not_answer_offers_nothing_within_the_budget(
    silent_server: str,
) -> None:
    # _bash_complete fails on its guard if the completion waits out the connect timeout.
    assert _bash_complete("queues", "pause", "", env={"TASKQ_PG_DSN": silent_server}) == []


def _command(path: str) -> Any:
    """The loaded command at ``path`` below ``taskq``."""
    command: Any = typer.main.get_command(app)
    for word in path.split():
        command = command.get_command(None, word)
        assert command is not None, f"taskq {path}: no such command"
    return command


def test_every_completed_parameter_exists_on_its_command() -> None:
    for (path, name), names in completion.PARAMETERS.items():
        params = {param.name: param for param in _command(path).params}
        assert name in params, (
            f"taskq {path} has no parameter {name!r} any more: update "
            f"taskq_cli/completion.py PARAMETERS (it completed {names.value} names)"
        )
