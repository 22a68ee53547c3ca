"""`taskq enqueue`: ids on stdout, the rows it says, one-line errors that insert nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line
from tests.conftest import CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def test_enqueue_prints_the_id_of_a_new_pending_job(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media")
    result = cli("enqueue", "resize", "--payload", '{"url": "u", "width": 100}')
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    job = db.get(result.stdout.strip())
    assert (job.actor, job.queue, job.status) == ("resize", "media", JobStatus.PENDING)
    assert job.payload == {"url": "u", "width": 100}


def test_every_option_lands_on_the_row(cli: Cli, db: Db) -> None:
    result = cli(
        "enqueue",
        "resize",
        "--queue",
        "media",
        "--delay",
        "5m",
        "--priority",
        "7",
        "--identity-key",
        "u-1",
        "--fairness-key",
        "tenant-7",
    )
    assert result.exit_code == 0, result.stderr
    job = db.get(result.stdout.strip())
    assert job.status is JobStatus.SCHEDULED
    assert timedelta(minutes=4) < job.scheduled_at - job.created_at <= timedelta(minutes=5)
    assert (job.queue, job.priority, job.identity_key, job.fairness_key) == (
        "media",
        7,
        "u-1",
        "tenant-7",
    )
    assert job.payload == {}


def test_iso_8601_delays_are_accepted(cli: Cli, db: Db) -> None:
    result = cli("enqueue", "work", "--delay", "PT2H")
    job = db.get(result.stdout.strip())
    assert timedelta(hours=1, minutes=59) < job.scheduled_at - job.created_at


def test_at_starts_the_job_at_that_moment_utc_unless_it_names_an_offset(cli: Cli, db: Db) -> None:
    offset = cli("enqueue", "work", "--at", "2099-12-24T09:00:00+01:00")
    assert offset.exit_code == 0, offset.stderr
    job = db.get(offset.stdout.strip())
    assert job.status is JobStatus.SCHEDULED
    assert job.scheduled_at == datetime(2099, 12, 24, 8, 0, tzinfo=UTC)
    naive = db.get(cli("enqueue", "work", "--at", "2099-12-24T09:00").stdout.strip())
    assert naive.scheduled_at == datetime(2099, 12, 24, 9, 0, tzinfo=UTC)
    past = db.get(cli("enqueue", "work", "--at", "2001-01-01").stdout.strip())
    assert past.status is JobStatus.PENDING


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--at", "tomorrow"], "--at: cannot read 'tomorrow'"),
        (["--at", "2099-01-01", "--delay", "5m"], "--delay and --at: give one of them"),
    ],
)
def test_a_bad_at_is_one_line_and_inserts_nothing(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    assert expected in one_error_line(cli("enqueue", "work", *args))
    assert db.count("jobs") == 0


def test_count_enqueues_that_many_jobs_and_prints_each_id(cli: Cli, db: Db) -> None:
    db.register_actor()
    result = cli("enqueue", "work", "--count", "5", "--payload", '{"n": 1}')
    assert result.exit_code == 0, result.stderr
    ids = result.stdout.split()
    assert len(ids) == 5 and len(set(ids)) == 5
    assert sorted(str(job.id) for job in db.jobs()) == sorted(ids)


def test_json_prints_the_jobs_created_with_their_queue_and_id(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media")
    result = cli("enqueue", "resize", "--count", "2", "--priority", "3", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["created"], document["actor"], document["queue"]) == (2, "resize", "media")
    assert document["registered_queue"] == "media"
    stored = {str(job.id): job for job in db.jobs()}
    assert sorted(job["id"] for job in document["jobs"]) == sorted(stored)
    for job in document["jobs"]:
        row = stored[job["id"]]
        assert (job["queue"], job["status"], job["priority"]) == ("media", "pending", 3)
        assert job["max_attempts"] == row.max_attempts


def test_json_of_an_unregistered_actor_keeps_the_warning_on_stderr(cli: Cli, db: Db) -> None:
    result = cli("enqueue", "nobody_knows", "--delay", "1h", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["registered_queue"] is None
    assert [job["status"] for job in document["jobs"]] == ["scheduled"]
    assert db.get(document["jobs"][0]["id"]).queue == document["queue"] == "default"
    assert result.stderr.startswith("warning: no worker has registered actor 'nobody_knows'")


def test_an_actor_no_worker_registered_is_enqueued_with_a_warning(cli: Cli, db: Db) -> None:
    result = cli("enqueue", "nobody_knows")
    assert result.exit_code == 0
    assert db.get(result.stdout.strip()).queue == "default"
    assert result.stderr.startswith("warning: no worker has registered actor 'nobody_knows'")
    assert "wait" in result.stderr


def test_a_misspelt_actor_is_named_with_the_closest_registered_one(cli: Cli, db: Db) -> None:
    db.register_actor("flaky")
    db.register_actor("resize")
    result = cli("enqueue", "flakey")
    assert result.exit_code == 0  # it still waits, as before: a worker may register it later
    assert "no worker has registered actor 'flakey' (did you mean 'flaky'?)" in result.stderr
    assert "--strict" in result.stderr


def test_strict_refuses_an_actor_no_worker_registered_and_enqueues_nothing(
    cli: Cli, db: Db
) -> None:
    db.register_actor("flaky")
    result = cli("enqueue", "flakey", "--strict", "--count", "3")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: no worker has registered actor 'flakey' (did you mean 'flaky'?)\n"
    )
    assert db.jobs() == []
    assert cli("enqueue", "flaky", "--strict").exit_code == 0  # a registered one goes in


def test_a_job_enqueued_before_its_actor_registered_elsewhere_is_explained(
    cli: Cli, db: Db
) -> None:
    result = cli("enqueue", "resize")
    assert result.exit_code == 0
    job_id = result.stdout.strip()
    assert "wait in queue 'default'" in result.stderr and "pass --queue" in result.stderr
    db.register_actor("resize", queue="media")  # its first worker starts, on 'media'
    db.register_worker(["media"], ["resize"])
    explained = cli("jobs", "explain", job_id)
    assert explained.exit_code == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[1].startswith(
        "blocked: actor 'resize' is registered on queue 'media', but this job waits in queue "
        "'default'"
    )
    assert any(line.split()[:2] == ["BLOCKS", "actor_on_other_queue"] for line in lines)
    # A later enqueue by name follows the registration.
    again = cli("enqueue", "resize")
    assert again.exit_code == 0 and again.stderr == ""
    assert db.get(again.stdout.strip()).queue == "media"


def test_a_queue_other_than_the_registered_one_is_warned_about(cli: Cli, db: Db) -> None:
    db.register_actor("resize", queue="media")
    result = cli("enqueue", "resize", "--queue", "bulk")
    assert result.exit_code == 0
    assert db.get(result.stdout.strip()).queue == "bulk"
    assert "registered on queue 'media'" in result.stderr


def test_an_invalid_json_payload_says_where_and_inserts_nothing(cli: Cli, db: Db) -> None:
    line = one_error_line(cli("enqueue", "work", "--payload", '{"a": 1,\n "b": }'))
    assert "invalid JSON payload" in line
    assert "line 2, column 7" in line
    assert db.count("jobs") == 0


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("[1, 2]", "expected an object, got array"),
        ('"text"', "expected an object, got string"),
        ("NaN", "NaN is not valid JSON"),
        ('{"a": "\\u0000"}', "NUL"),
        ('{"a": 1e999}', "too large"),
    ],
)
def test_payloads_postgres_cannot_store_are_refused(
    cli: Cli, db: Db, payload: str, expected: str
) -> None:
    assert expected in one_error_line(cli("enqueue", "work", "--payload", payload))
    assert db.count("jobs") == 0


def test_the_payload_can_come_from_a_file(cli: Cli, db: Db, tmp_path: Path) -> None:
    (tmp_path / "payload.json").write_text('{"from": "file"}')
    result = cli("enqueue", "work", "--payload", f"@{tmp_path / 'payload.json'}")
    assert db.get(result.stdout.strip()).payload == {"from": "file"}
    missing = one_error_line(cli("enqueue", "work", "--payload", "@nope.json"))
    assert "cannot read 'nope.json'" in missing


@pytest.mark.parametrize("delay", ["soon", "5 minutes", "-5m", "P", "1e400"])
def test_an_invalid_delay_is_one_line_and_inserts_nothing(cli: Cli, db: Db, delay: str) -> None:
    assert "--delay" in one_error_line(cli("enqueue", "work", f"--delay={delay}"))
    assert db.count("jobs") == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--count", "0"], "--count: 0 is out of range"),
        (["--priority", str(2**31)], "--priority"),
        (["--count", "many"], "Invalid value for '--count'"),
        (["--identity-key", "a\x00b"], "NUL"),
    ],
)
def test_bad_numbers_and_keys_are_one_line(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    assert expected in one_error_line(cli("enqueue", "work", *args))
    assert db.count("jobs") == 0


@pytest.fixture
def registry_module(tmp_path: Path) -> str:
    """An importable module (the CLI runs in tmp_path) with a typed actor; returns MOD:ATTR."""
    name = f"cli_actors_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from pydantic import BaseModel\n"
        "from taskq_core import actor\n\n"
        "class Resize(BaseModel):\n"
        "    url: str\n"
        "    width: int\n\n"
        "@actor(queue='media')\n"
        "async def resize(payload: Resize) -> None: ...\n\n"
        "registry = [resize]\n"
    )
    return f"{name}:registry"


def test_actors_validates_the_payload_with_the_actor_model(
    cli: Cli, db: Db, registry_module: str
) -> None:
    line = one_error_line(
        cli("enqueue", "resize", "--actors", registry_module, "--payload", '{"url": "u"}')
    )
    assert "payload rejected by resize (Resize): width: Field required" in line
    assert db.count("jobs") == 0
    ok = cli(
        "enqueue", "resize", "--actors", registry_module, "--payload", '{"url": "u", "width": 3}'
    )
    assert ok.exit_code == 0, ok.stderr
    assert db.get(ok.stdout.strip()).queue == "media"


def test_actors_must_contain_the_actor(cli: Cli, registry_module: str) -> None:
    line = one_error_line(cli("enqueue", "thumbnail", "--actors", registry_module))
    assert "has no actor 'thumbnail' (it has: resize)" in line


def test_max_pending_refuses_the_enqueue(cli: Cli, db: Db) -> None:
    db.register_actor()
    db.call(lambda b: b.update_actor_config("work", max_pending=2))
    assert cli("enqueue", "work", "--count", "2").exit_code == 0
    assert "max_pending is 2" in one_error_line(cli("enqueue", "work"))
    assert db.count("jobs") == 2


def test_an_empty_actor_name_is_refused(cli: Cli, db: Db) -> None:
    assert "ACTOR: must not be empty" in one_error_line(cli("enqueue", " "))
    assert db.count("jobs") == 0


def test_dsn_and_schema_flags_work_after_the_subcommand(taskq_cli: Any, pg: PgTarget) -> None:
    result = taskq_cli(
        "enqueue",
        "work",
        "--dsn",
        pg.dsn,
        "--schema",
        pg.schema,
        env={"TASKQ_PG_DSN": "postgresql://nobody@127.0.0.1:1/none"},
    )
    assert result.exit_code == 0, result.stderr
    assert Db(pg).count("jobs") == 1


def test_an_unreachable_database_is_one_line(taskq_cli: Any) -> None:
    result = taskq_cli("enqueue", "work", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/none" in one_error_line(result)


def test_an_unmigrated_schema_says_to_migrate(taskq_cli: Any, empty_schema: PgTarget) -> None:
    line = one_error_line(taskq_cli("enqueue", "work", env=empty_schema.env()))
    assert f"schema '{empty_schema.schema}'" in line
    assert "taskq migrate up" in line
