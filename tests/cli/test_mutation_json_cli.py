"""``--json`` on the commands that change something: one document on stdout saying what
changed (``{"field": {"from", "to"}}``) and the state after, checked against the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, parse_json
from tests.conftest import CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def test_cancel_json_says_what_changed(cli: Cli, db: Db) -> None:
    waiting = db.enqueue()
    document = parse_json(cli("cancel", str(waiting.id), "--reason", "dup", "--json"))
    assert document == {
        "job_id": str(waiting.id),
        "outcome": "cancelled",
        "changed": {"status": {"from": "pending", "to": "cancelled"}},
        "status": "cancelled",
        "cancel_reason": "dup",
    }
    assert db.get(waiting.id).status is JobStatus.CANCELLED
    running = db.enqueue(priority=100)
    db.claim(uuid4())
    document = parse_json(cli("cancel", str(running.id), "--json"))
    assert document["outcome"] == "requested"
    assert document["changed"] == {"cancel_phase": {"from": 0, "to": 1}}
    again = parse_json(cli("cancel", str(waiting.id), "--json"))
    assert (again["outcome"], again["changed"]) == ("terminal", {})


def test_bulk_cancel_and_retry_json_count_what_they_changed(cli: Cli, db: Db) -> None:
    for _ in range(3):
        db.enqueue(queue="bulk")
    cancelled = parse_json(cli("cancel", "--queue", "bulk", "--yes", "--json"))
    assert cancelled == {
        "filter": {
            "statuses": ["pending", "scheduled", "running", "waiting"],
            "queue": "bulk",
            "actor": None,
        },
        "cancelled": 3,
        "requested": 0,
    }
    retried = parse_json(
        cli("retry", "--status", "cancelled", "--queue", "bulk", "--yes", "--json")
    )
    assert retried == {
        "filter": {"statuses": ["cancelled"], "queue": "bulk", "actor": None},
        "retried": 3,
    }
    assert {j.status for j in db.jobs(queue="bulk")} == {JobStatus.PENDING}


def test_retry_json_says_the_job_is_pending_again(cli: Cli, db: Db) -> None:
    failed = db.failed_job()
    document = parse_json(cli("retry", str(failed.id), "--json"))
    assert document == {
        "job_id": str(failed.id),
        "changed": {"status": {"from": "failed", "to": "pending"}},
        "status": "pending",
    }
    assert db.get(failed.id).status is JobStatus.PENDING


def test_queue_settings_json_says_what_changed(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    paused = parse_json(cli("queues", "pause", "media", "--json"))
    assert paused["queue"] == "media" and paused["created"] is True
    assert paused["changed"] == {
        "paused": {"from": False, "to": True},
        "paused_by": {"from": None, "to": paused["settings"]["paused_by"]},
    }
    assert "@" in paused["settings"]["paused_by"]
    assert paused["settings"]["paused"] is True and paused["settings"]["counts"]["pending"] == 1
    capped = parse_json(cli("queues", "set-max-concurrent", "media", "4", "--json"))
    assert (capped["created"], capped["changed"]) == (
        False,
        {"max_concurrent": {"from": None, "to": 4}},
    )
    mode = parse_json(cli("queues", "set-mode", "media", "round_robin", "--json"))
    assert mode["changed"] == {"mode": {"from": "strict_fifo", "to": "round_robin"}}
    resumed = parse_json(cli("queues", "resume", "media", "--json"))
    assert resumed["changed"] == {
        "paused": {"from": True, "to": False},
        "paused_by": {"from": paused["settings"]["paused_by"], "to": None},
    }
    unchanged = parse_json(cli("queues", "resume", "media", "--json"))
    assert unchanged["changed"] == {}
    row = db.call(lambda b: b.get_queue("media"))
    assert row is not None and (row.paused, row.max_concurrent, row.mode) == (
        False,
        4,
        "round_robin",
    )


def test_actor_config_set_json_says_what_changed(cli: Cli, db: Db) -> None:
    db.register_actor("resize", "media", max_concurrent=2)
    command = ["actor-config", "set", "resize", "--max-concurrent", "5", "--result-ttl", "1h"]
    document = parse_json(cli(*command, "--json"))
    assert document["actor"] == "resize"
    assert document["changed"] == {
        "max_concurrent": {"from": 2, "to": 5},
        "result_ttl_seconds": {"from": None, "to": 3600.0},
    }
    assert document["config"]["max_concurrent"] == 5
    stored = db.call(lambda b: b.get_actor_config("resize"))
    assert stored is not None and stored.max_concurrent == 5


def test_migrate_up_json_lists_what_it_applied(taskq_cli: Any, empty_schema: PgTarget) -> None:
    first = taskq_cli("migrate", "up", "--json", env=empty_schema.env())
    document = parse_json(first)
    assert document["schema"] == empty_schema.schema
    assert document["applied"][0] == "0001_initial" and document["drift"] == []
    again = parse_json(taskq_cli("migrate", "up", "--json", env=empty_schema.env()))
    assert again["applied"] == []
