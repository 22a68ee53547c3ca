"""`taskq actor-config ...`: operator-owned capacity with the seeds' NULL semantics; diff."""

from __future__ import annotations

import getpass
import json
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import ActorDeclaration
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]

CONFIG_FIELDS = {
    "actor",
    "queue",
    "metadata",
    "max_concurrent",
    "max_pending",
    "result_ttl_seconds",
    "retry",
    "priority",
    "created_at",
    "updated_at",
}


def test_list_shows_every_registered_actor_and_what_null_means(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media", max_concurrent=4)
    db.register_actor("email", queue="mail")
    result = cli("actor-config", "list")
    assert result.exit_code == 0, result.stderr
    header, email, resize = result.stdout.splitlines()
    assert header.split()[:5] == ["actor", "queue", "max_concurrent", "max_pending", "result_ttl"]
    assert email.split()[:3] == ["email", "mail", "unlimited"]
    assert "(@actor literal)" in email
    assert resize.split()[:3] == ["resize", "media", "4"]


def test_list_and_get_json_have_the_documented_fields(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media", max_concurrent=4)
    (row,) = parse_json(cli("actor-config", "list", "--json"))["actors"]
    assert set(row) == CONFIG_FIELDS
    assert (row["actor"], row["max_concurrent"], row["max_pending"]) == ("resize", 4, None)
    # get adds the operator's changes of the actor, newest first (none yet).
    assert parse_json(cli("actor-config", "get", "resize", "--json")) == {**row, "changes": []}


def test_set_records_who_why_and_what_and_get_shows_it(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media", max_concurrent=4)
    result = cli(
        "actor-config", "set", "resize", "--max-concurrent", "2", "--reason", "db is struggling"
    )
    assert result.exit_code == 0, result.stderr
    cli("actor-config", "set", "resize", "--result-ttl", "5m")
    me = f"{getpass.getuser()}@{socket.gethostname()}"
    newest, oldest = parse_json(cli("actor-config", "get", "resize", "--json"))["changes"]
    assert (oldest["by"], oldest["reason"], oldest["changed"]) == (
        me,
        "db is struggling",
        {"max_concurrent": {"from": 4, "to": 2}},
    )
    assert newest["changed"] == {"result_ttl": {"from": None, "to": 300.0}}
    assert newest["reason"] is None
    shown = cli("actor-config", "get", "resize", env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.stderr
    assert "operator changes, newest first" in shown.stdout
    assert "max_concurrent 4 -> 2" in shown.stdout and "db is struggling" in shown.stdout
    assert "result_ttl - -> 300s" in shown.stdout


def test_get_shows_one_actor(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media")
    result = cli("actor-config", "get", "resize")
    assert result.exit_code == 0
    assert "queue           media" in result.stdout
    assert "max_concurrent  unlimited" in result.stdout


def test_set_writes_the_capacity_fields(cli: Cli, db: Db) -> None:
    db.register_actor("resize")
    result = cli(
        "actor-config",
        "set",
        "resize",
        "--max-concurrent",
        "20",
        "--max-pending",
        "5000",
        "--result-ttl",
        "2h",
    )
    assert result.exit_code == 0, result.stderr
    assert "max_concurrent  20" in result.stdout
    row = db.call(lambda b: b.get_actor_config("resize"))
    assert row is not None
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (
        20,
        5000,
        timedelta(hours=2),
    )


def test_set_leaves_the_fields_it_was_not_given(cli: Cli, db: Db) -> None:
    db.register_actor("resize", max_concurrent=3)
    assert cli("actor-config", "set", "resize", "--max-pending", "9").exit_code == 0
    row = db.call(lambda b: b.get_actor_config("resize"))
    assert row is not None and (row.max_concurrent, row.max_pending) == (3, 9)


def test_clear_flags_write_null_with_the_seeds_meaning(cli: Cli, db: Db) -> None:
    db.register_actor("resize")
    cli("actor-config", "set", "resize", "--max-concurrent", "1", "--max-pending", "5")
    cli("actor-config", "set", "resize", "--result-ttl", "PT30M")
    result = cli(
        "actor-config",
        "set",
        "resize",
        "--clear-max-concurrent",
        "--clear-max-pending",
        "--clear-result-ttl",
    )
    assert result.exit_code == 0, result.stderr
    assert "max_concurrent  unlimited" in result.stdout
    assert "max_pending     (@actor literal)" in result.stdout
    row = db.call(lambda b: b.get_actor_config("resize"))
    assert row is not None
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (None, None, None)


def test_a_cleared_max_concurrent_is_unlimited_for_dispatch(cli: Cli, db: Db) -> None:
    db.register_actor("work")
    for _ in range(3):
        db.enqueue()
    assert cli("actor-config", "set", "work", "--max-concurrent", "1").exit_code == 0
    assert len(db.claim(uuid4(), limit=3)) == 1
    assert cli("actor-config", "set", "work", "--clear-max-concurrent").exit_code == 0
    assert len(db.claim(uuid4(), limit=3)) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["resize"], "nothing to change"),
        (["resize", "--max-pending", "3", "--clear-max-pending"], "contradict each other"),
        (["resize", "--max-concurrent", "-1"], "out of range"),
        (["resize", "--result-ttl", "forever"], "--result-ttl: invalid duration 'forever'"),
        (["ghost", "--max-concurrent", "2"], "unknown actor 'ghost'"),
    ],
)
def test_set_rejects_bad_input_and_changes_nothing(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    db.register_actor("resize", max_concurrent=7)
    before = db.call(lambda b: b.get_actor_config("resize"))
    assert expected in one_error_line(cli("actor-config", "set", *args))
    assert db.call(lambda b: b.get_actor_config("resize")) == before
    assert db.count("actor_config") == 1


def test_get_of_an_unknown_actor_is_one_line(cli: Cli) -> None:
    assert "unknown actor 'ghost'" in one_error_line(cli("actor-config", "get", "ghost"))


# --- diff ---------------------------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path: Path) -> str:
    """A registry module in the CLI's working directory; returns MOD:ATTR."""
    name = f"cli_diff_actors_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from taskq_core import actor\n\n"
        "@actor(queue='media', max_concurrent=4)\n"
        "async def resize(payload: dict) -> None: ...\n\n"
        "@actor(queue='mail')\n"
        "async def email(payload: dict) -> None: ...\n\n"
        "registry = [resize, email]\n"
    )
    return f"{name}:registry"


def started_with(
    db: Db, actor: str, queue: str, max_concurrent: int | None = None, **code: Any
) -> None:
    """What a worker start with the registry's literals writes (the default retry policy and
    priority unless ``code`` says otherwise)."""
    policy: dict[str, Any] = {"retry_kind": "transient", "max_attempts": 3, "priority": 0}
    declared = ActorDeclaration(actor, queue, {}, max_concurrent, None, None, **{**policy, **code})
    db.call(lambda b: b.sync_actor_configs([declared], force=False))


def test_diff_without_differences_exits_0(cli: Cli, db: Db, registry: str) -> None:
    started_with(db, "resize", "media", max_concurrent=4)
    started_with(db, "email", "mail")
    result = cli("actor-config", "diff", "--actors", registry)
    assert result.exit_code == 0, result.stderr
    assert "matches the code for all 2 actor(s)" in result.stdout


def test_a_changed_retry_policy_is_an_update_not_drift(cli: Cli, db: Db, registry: str) -> None:
    started_with(db, "resize", "media", max_concurrent=4, max_attempts=2, priority=7)
    started_with(db, "email", "mail")
    result = cli("actor-config", "diff", "--actors", registry)
    assert result.exit_code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert rows == [
        ["resize", "max_attempts", "2", "3", "update"],
        ["resize", "priority", "7", "0", "update"],
    ]


def test_capacity_overrides_and_new_actors_are_not_drift(cli: Cli, db: Db, registry: str) -> None:
    db.register_actor("resize", queue="media", max_concurrent=4)
    cli("actor-config", "set", "resize", "--max-concurrent", "20")
    result = cli("actor-config", "diff", "--actors", registry)
    assert result.exit_code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert ["resize", "max_concurrent", "20", "4", "override"] in rows
    assert ["email", "*", "-", "new", "new"] in rows


def test_structural_drift_exits_1_with_one_error_line(cli: Cli, db: Db, registry: str) -> None:
    db.register_actor("resize", queue="old_queue")
    db.register_actor("email", queue="mail")
    result = cli("actor-config", "diff", "--actors", registry, "--json")
    line = one_error_line(result)
    assert "actor config drift in resize.queue" in line
    document = json.loads(result.stdout)  # printed before the failure
    assert document["drift"] is True
    assert {
        "actor": "resize",
        "field": "queue",
        "stored": "old_queue",
        "code": "media",
        "kind": "drift",
    } in document["differences"]


def test_diff_with_a_bad_registry_is_one_line(cli: Cli) -> None:
    assert "expected MODULE:ATTRIBUTE" in one_error_line(
        cli("actor-config", "diff", "--actors", "nocolon")
    )
