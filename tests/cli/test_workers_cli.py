"""`taskq workers list`: id, label, host, pid, workgroup, last seen, leader, and liveness."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from taskq_cli.operator import operator_id
from tests.cli.conftest import Db, parse_json
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def test_list_shows_each_worker_its_state_and_the_leader(cli: Cli, db: Db) -> None:
    stale = db.register_worker(["media"], ["resize"], label="old", workgroup_instance="wg-1")
    db.sql("UPDATE {schema}.workers SET last_seen_at = last_seen_at - interval '10 minutes'")
    stopped = db.register_worker(["mail"], ["email"], label="gone")
    db.call(lambda b: b.mark_worker_stopped(stopped))
    leader = db.register_worker(["media", "mail"], ["resize", "email"], label="web-1")
    db.sql(
        "INSERT INTO {schema}.maintenance_leader (name, worker_id) VALUES ('maintenance', $1)",
        leader,
    )
    result = cli("workers", "list")
    assert result.exit_code == 0, result.stderr
    header, *rows = (line.split() for line in result.stdout.splitlines())
    assert header == [
        "id",
        "label",
        "host",
        "pid",
        "workgroup",
        "state",
        "last",
        "seen",
        "leader",
        "jobs",
        "queues",
    ]
    by_id = {row[0]: row for row in rows}
    assert by_id[str(leader)][1:6] == ["web-1", "host-a", "4242", "-", "running"]
    assert "yes" in by_id[str(leader)]
    assert by_id[str(leader)][-1] == "media,mail"
    assert by_id[str(stale)][1:6] == ["old", "host-a", "4242", "wg-1", "stale"]
    assert by_id[str(stale)][6].startswith("10m")
    assert by_id[str(stopped)][5] == "stopped"


def test_list_json_has_the_documented_fields(cli: Cli, db: Db) -> None:
    worker = db.register_worker(["media"], ["resize"], concurrency=8, label="web-1")
    (row,) = parse_json(cli("workers", "list", "--json"))["workers"]
    assert set(row) == {
        "id",
        "label",
        "host",
        "pid",
        "workgroup",
        "status",
        "state",
        "leader",
        "last_seen_at",
        "started_at",
        "stopped_at",
        "queues",
        "actors",
        "concurrency",
        "running_jobs",
        "claimed_jobs",
        "version",
        "exit_code",
        "exit_signal",
        "acknowledged_at",
        "acknowledged_by",
    }
    assert (row["id"], row["label"], row["host"], row["pid"]) == (
        str(worker),
        "web-1",
        "host-a",
        4242,
    )
    assert (row["state"], row["leader"], row["concurrency"]) == ("running", False, 8)
    assert datetime.fromisoformat(row["last_seen_at"]).tzinfo is not None


def test_no_workers_is_said_on_stderr(cli: Cli) -> None:
    result = cli("workers", "list")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no workers" in result.stderr
    assert parse_json(cli("workers", "list", "--json")) == {"workers": []}


def test_alive_lists_only_running_workers_heard_from_recently(cli: Cli, db: Db) -> None:
    stale = db.register_worker(["media"], ["resize"], label="old")
    db.sql("UPDATE {schema}.workers SET last_seen_at = last_seen_at - interval '10 minutes'")
    stopped = db.register_worker(["mail"], ["email"], label="gone")
    db.call(lambda b: b.mark_worker_stopped(stopped))
    live = db.register_worker(["media"], ["resize"], label="web-1")
    document = parse_json(cli("workers", "list", "--alive", "--json"))
    assert [(w["id"], w["state"]) for w in document["workers"]] == [(str(live), "running")]
    table = cli("workers", "list", "--alive")
    assert str(live) in table.stdout
    assert str(stale) not in table.stdout and str(stopped) not in table.stdout


def test_alive_with_none_alive_says_how_many_are_not(cli: Cli, db: Db) -> None:
    stopped = db.register_worker(["mail"], ["email"])
    db.call(lambda b: b.mark_worker_stopped(stopped))
    result = cli("workers", "list", "--alive")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no live workers (1 stopped or stale" in result.stderr


# --- taskq workers ack ------------------------------------------------------------------------


def _stale(db: Db, label: str = "old") -> str:
    worker = db.register_worker(["media"], ["resize"], label=label)
    db.sql(
        "UPDATE {schema}.workers SET last_seen_at = last_seen_at - interval '10 minutes' "
        "WHERE id = $1",
        worker,
    )
    return str(worker)


def test_ack_acknowledges_a_stale_workers_silence_with_who_and_why(cli: Cli, db: Db) -> None:
    worker = _stale(db)
    result = cli("workers", "ack", worker[:13], "--reason", "host decommissioned")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"acknowledged stale worker old (host-a:4242) {worker}")
    assert "no alert unless it is heard from again" in result.stdout
    [row] = parse_json(cli("workers", "list", "--json"))["workers"]
    assert (row["state"], row["acknowledged_by"]) == ("stale", operator_id())
    assert row["acknowledged_at"] is not None
    [entry] = db.call(lambda b: b.list_operator_log(action="worker_ack"))
    assert (entry.target, entry.by, entry.reason) == (worker, operator_id(), "host decommissioned")
    listed = cli("workers", "list")
    assert "stale, acked" in listed.stdout

    again = cli("workers", "ack", worker)
    assert again.exit_code == 0, again.stderr
    assert f"already acknowledged by {operator_id()}" in again.stdout
    assert len(db.call(lambda b: b.list_operator_log(action="worker_ack"))) == 1


def test_ack_json_is_one_document_with_the_outcome_and_the_row(cli: Cli, db: Db) -> None:
    worker = _stale(db)
    document = parse_json(cli("workers", "ack", worker, "--json"))
    assert document["outcome"] == "acknowledged"
    assert document["worker"]["id"] == worker
    assert document["worker"]["acknowledged_by"] == operator_id()


def test_ack_refuses_a_running_worker_in_one_line(cli: Cli, db: Db) -> None:
    worker = str(db.register_worker(["media"], ["resize"], label="web-1"))
    result = cli("workers", "ack", worker)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(f"error: worker web-1 (host-a:4242) {worker} is running")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert db.call(lambda b: b.list_operator_log(action="worker_ack")) == []


def test_ack_of_a_stopped_worker_says_there_is_no_alert(cli: Cli, db: Db) -> None:
    stopped = db.register_worker(["mail"], ["email"], label="gone")
    db.call(lambda b: b.mark_worker_exited(stopped, None, "SIGKILL"))
    result = cli("workers", "ack", str(stopped))
    assert result.exit_code == 0, result.stderr
    assert "is stopped: it raises no alert" in result.stdout
    assert "stopped, SIGKILL" in cli("workers", "list").stdout


def test_ack_of_an_unknown_id_is_an_error(cli: Cli, db: Db) -> None:
    _stale(db)
    for text in ("ffffffff-0000", ""):
        result = cli("workers", "ack", text)
        assert result.exit_code == 1 and result.stderr.startswith(f"error: no worker {text!r}")
