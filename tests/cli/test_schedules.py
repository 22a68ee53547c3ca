"""`taskq schedules ...`: what each command writes to the schedules table, what it prints,
and bad input refused with one line before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from taskq_core.backend.protocol import ScheduleRecord, ScheduleSpec
from taskq_core.cron_timing import Schedule
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.cli.test_completions import _bash_complete, needs_bash
from tests.conftest import CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def schedule(db: Db, name: str) -> ScheduleRecord | None:
    return db.call(lambda b: b.get_schedule(name))


def test_add_creates_a_database_schedule_and_list_shows_it(cli: Cli, db: Db) -> None:
    db.register_actor("build_report", queue="reports")
    result = cli(
        "schedules", "add", "nightly", "build_report", "0  3 * * *",
        "--timezone", "Europe/Berlin", "--payload", '{"full": true}',
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""  # a registered actor: no warning
    record = schedule(db, "nightly")
    assert record is not None
    assert (record.actor, record.cron, record.timezone) == (
        "build_report",
        "0 3 * * *",
        "Europe/Berlin",
    )
    assert record.payload == {"full": True} and record.queue is None
    assert record.enabled and not record.declared_in_code
    assert result.stdout.startswith("schedule 'nightly' created: build_report at 0 3 * * * ")

    (listed,) = parse_json(cli("schedules", "list", "--json"))["schedules"]
    assert listed["name"] == "nightly" and listed["source"] == "database"
    assert listed["next_fire_at"] == record.next_fire_at.isoformat()  # type: ignore[union-attr]
    table = cli("schedules", "list")
    assert table.exit_code == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:4] == ["name", "actor", "cron", "enabled"]
    assert row.split()[:8] == ["nightly", "build_report", "0", "3", "*", "*", "*", "yes"]


def test_list_filters_by_actor_and_enabled(cli: Cli, db: Db) -> None:
    for name, actor in (("a", "one"), ("b", "two"), ("c", "one")):
        db.call(lambda b, n=name, a=actor: b.create_schedule(ScheduleSpec(n, a, "0 * * * *")))
    assert cli("schedules", "disable", "c").exit_code == 0

    def names(*flags: str) -> list[str]:
        return [
            s["name"] for s in parse_json(cli("schedules", "list", "--json", *flags))["schedules"]
        ]

    assert names() == ["a", "b", "c"]
    assert names("--actor", "one") == ["a", "c"]
    assert names("--disabled") == ["c"]
    assert names("--enabled", "--actor", "one") == ["a"]
    empty = cli("schedules", "list", "--actor", "nobody")
    assert empty.exit_code == 0 and empty.stdout == "" and "no schedules match" in empty.stderr


def test_show_json_lists_the_next_five_fires_in_the_zone_and_in_utc(cli: Cli, db: Db) -> None:
    assert (
        cli(
            "schedules", "add", "nightly", "report", "0 3 * * *", "--timezone", "Europe/Berlin"
        ).exit_code
        == 0
    )
    document = parse_json(cli("schedules", "show", "nightly", "--json"))
    record = schedule(db, "nightly")
    assert record is not None and record.next_fire_at is not None
    expected = [
        record.next_fire_at,
        *Schedule("0 3 * * *", "Europe/Berlin").next_fires(record.next_fire_at, 4),
    ]
    fires = document["next_fires"]
    assert [datetime.fromisoformat(f["utc"]) for f in fires] == expected
    for fire in fires:
        local = datetime.fromisoformat(fire["at"])
        assert (local.hour, local.minute) == (3, 0)  # the zone's 03:00, whatever its offset
        assert local.utcoffset() == local.astimezone(ZoneInfo("Europe/Berlin")).utcoffset()
        assert local == datetime.fromisoformat(fire["utc"])
    assert document["cron"] == "0 3 * * *" and document["last_fired_at"] is None
    assert document["last_job_id"] is None and document["enabled"] is True

    text = cli("schedules", "show", "nightly")
    assert text.exit_code == 0, text.stderr
    assert "0 3 * * * (Europe/Berlin)" in text.stdout
    assert "next fire (Europe/Berlin)" in text.stdout
    assert expected[4].isoformat(timespec="seconds") in text.stdout


def test_disable_and_enable_change_the_row_and_report_it(cli: Cli, db: Db) -> None:
    assert cli("schedules", "add", "tick", "work", "*/5 * * * *").exit_code == 0
    disabled = parse_json(cli("schedules", "disable", "tick", "--json"))
    assert disabled["schedule"] == "tick"
    assert disabled["changed"]["enabled"] == {"from": True, "to": False}
    assert disabled["settings"]["next_fire_at"] is None
    record = schedule(db, "tick")
    assert record is not None and not record.enabled and record.next_fire_at is None
    enabled = cli("schedules", "enable", "tick")
    assert enabled.exit_code == 0, enabled.stderr
    assert enabled.stdout.startswith("schedule 'tick' enabled: next fire ")
    record = schedule(db, "tick")
    assert record is not None and record.enabled and record.next_fire_at is not None


def test_run_enqueues_one_job_by_hand_and_prints_its_id(cli: Cli, db: Db) -> None:
    db.register_actor("report", queue="reports")
    assert (
        cli("schedules", "add", "nightly", "report", "0 3 * * *", "--payload", '{"n": 1}').exit_code
        == 0
    )
    result = cli("schedules", "run", "nightly")
    assert result.exit_code == 0, result.stderr
    job = db.get(result.stdout.strip())
    assert (job.actor, job.queue, job.payload) == (
        "report",
        "reports",
        {"n": 1},
    )  # the actor's queue
    assert job.metadata == {"schedule": "nightly", "manual": True}
    record = schedule(db, "nightly")
    assert record is not None and record.last_fired_at is None  # its own fire times untouched

    shown = cli("jobs", "show", str(job.id))
    assert "from schedule nightly (run by hand)" in shown.stdout
    explained = cli("jobs", "explain", str(job.id))
    assert explained.stdout.splitlines()[1] == "from schedule nightly (run by hand)"
    assert parse_json(cli("jobs", "explain", str(job.id), "--json"))["origin"] == (
        "from schedule nightly (run by hand)"
    )
    as_json = parse_json(cli("schedules", "run", "nightly", "--json"))
    assert as_json["schedule"] == "nightly" and as_json["job"]["queue"] == "reports"


def test_a_fired_job_names_its_schedule_and_fire_time(cli: Cli, db: Db) -> None:
    job = db.enqueue(
        "report", metadata={"schedule": "nightly", "fire_time": "2026-12-03T02:00:00+00:00"}
    )
    origin = "from schedule nightly (fire time 2026-12-03T02:00:00+00:00)"
    assert origin in cli("jobs", "show", str(job.id)).stdout
    assert origin in cli("jobs", "explain", str(job.id)).stdout
    plain = db.enqueue("report")
    assert "from schedule" not in cli("jobs", "show", str(plain.id)).stdout


def test_delete_removes_the_schedule_and_keeps_its_jobs(cli: Cli, db: Db) -> None:
    assert cli("schedules", "add", "tick", "work", "*/5 * * * *").exit_code == 0
    job_id = cli("schedules", "run", "tick").stdout.strip()
    document = parse_json(cli("schedules", "delete", "tick", "--json"))
    assert document["schedule"] == "tick" and document["deleted"] is True
    assert schedule(db, "tick") is None
    assert db.get(job_id).metadata["schedule"] == "tick"
    again = one_error_line(cli("schedules", "delete", "tick"))
    assert again == "error: no schedule named 'tick'"


def test_every_write_goes_to_the_operator_log_with_who_and_why(cli: Cli, db: Db) -> None:
    db.register_actor("build_report")
    commands = [
        ("add", "nightly", "build_report", "0 3 * * *", "--reason", "new report"),
        ("disable", "nightly", "--reason", "quarter close"),
        ("enable", "nightly"),
        ("delete", "nightly", "--reason", "retired"),
    ]
    for command in commands:
        result = cli("schedules", *command)
        assert result.exit_code == 0, result.stderr
    entries = db.call(lambda b: b.list_operator_log(target="nightly"))
    assert [(e.action, e.reason) for e in entries] == [
        ("schedule_delete", "retired"),
        ("schedule_update", None),
        ("schedule_update", "quarter close"),
        ("schedule_create", "new report"),
    ]
    assert all(e.by and "@" in e.by for e in entries)
    assert entries[2].detail == {"changed": {"enabled": [True, False]}}


def test_deleting_a_code_schedule_warns_it_comes_back(cli: Cli, db: Db) -> None:
    db.call(lambda b: b.sync_code_schedules([ScheduleSpec("nightly", "report", "0 3 * * *")]))
    result = cli("schedules", "delete", "nightly")
    assert result.exit_code == 0, result.stderr
    assert "declared with @cron" in result.stderr
    assert schedule(db, "nightly") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["x", "work", "* * *"], "error: CRON: expected a 5-field cron expression"),
        (["x", "work", "61 * * * *"], "error: CRON: not a valid cron expression"),
        (
            ["x", "work", "0 3 * * *", "--timezone", "Mars/Olympus"],
            "error: --timezone: unknown timezone 'Mars/Olympus'",
        ),
        (
            ["x", "work", "0 3 * * *", "--payload", "{nope"],
            "error: invalid JSON payload (--payload)",
        ),
        (
            ["x", "work", "0 3 * * *", "--payload", "[1]"],
            "error: invalid JSON payload (--payload): expected an object",
        ),
        (["", "work", "0 3 * * *"], "error: NAME: must not be empty"),
        (["taken", "work", "0 3 * * *"], "error: NAME: a schedule named 'taken' already exists"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    cli: Cli, db: Db, args: list[str], message: str
) -> None:
    db.call(lambda b: b.create_schedule(ScheduleSpec("taken", "other", "0 * * * *")))
    line = one_error_line(cli("schedules", "add", *args))
    assert line.startswith(message), line
    (kept,) = db.call(lambda b: b.list_schedules())
    assert (kept.name, kept.actor, kept.cron) == ("taken", "other", "0 * * * *")


def test_unknown_names_are_one_line(cli: Cli, db: Db) -> None:
    for command in ("show", "enable", "disable", "delete", "run"):
        line = one_error_line(cli("schedules", command, "ghost"))
        assert line == "error: no schedule named 'ghost'", (command, line)
    assert db.count("jobs") == 0


def test_an_actor_no_worker_registered_is_a_warning_not_an_error(cli: Cli, db: Db) -> None:
    result = cli("schedules", "add", "tick", "unheard_of", "*/5 * * * *")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("warning: no worker has registered actor 'unheard_of' yet")
    assert result.stderr.count("\n") == 1
    assert schedule(db, "tick") is not None


def test_the_mutating_commands_print_one_json_document(cli: Cli, db: Db) -> None:
    created = parse_json(cli("schedules", "add", "tick", "work", "*/5 * * * *", "--json"))
    assert created["schedule"] == "tick" and created["created"] is True
    settings: dict[str, Any] = created["settings"]
    assert settings["cron"] == "*/5 * * * *" and settings["source"] == "database"
    next_fire = datetime.fromisoformat(settings["next_fire_at"])
    assert next_fire.minute % 5 == 0 and next_fire - datetime.now(next_fire.tzinfo) <= timedelta(
        minutes=5
    )


@needs_bash
def test_schedule_names_complete(cli: Cli, db: Db, pg: PgTarget) -> None:
    for name in ("nightly", "hourly", "tick"):
        db.call(lambda b, n=name: b.create_schedule(ScheduleSpec(n, "work", "0 * * * *")))
    env = {"TASKQ_PG_DSN": pg.dsn, "TASKQ_SCHEMA_NAME": pg.schema}
    assert _bash_complete("schedules", "run", "", env=env) == ["hourly", "nightly", "tick"]
    assert _bash_complete("schedules", "disable", "n", env=env) == ["nightly"]


def test_list_says_when_a_fire_is_overdue(cli: Cli, db: Db) -> None:
    db.call(lambda b: b.create_schedule(ScheduleSpec("late", "work", "0 * * * *")))
    db.sql("UPDATE {schema}.schedules SET next_fire_at = clock_timestamp() - interval '5 minutes'")
    result = cli("schedules", "list")
    assert result.exit_code == 0, result.stderr
    assert " due 5m" in result.stdout.splitlines()[1]  # no leader has fired it yet
