"""`taskq queues ...`: every known queue listed; changes land in the row and dispatch obeys."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from uuid import uuid4

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def test_list_shows_queues_with_jobs_and_queues_with_only_a_row(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    db.enqueue(queue="media")
    db.failed_job(queue="media")
    db.call(lambda b: b.update_queue("idle", paused=True, max_concurrent=3))
    result = cli("queues", "list")
    assert result.exit_code == 0, result.stderr
    header, idle, media = result.stdout.splitlines()
    assert header.split()[:5] == ["queue", "mode", "max_concurrent", "paused", "pending"]
    assert idle.split()[:4] == ["idle", "strict_fifo", "3", "yes,"]  # then when it was paused
    assert media.split() == ["media", "strict_fifo", "-", "no", "2", "0", "0", "0", "1"] + ["0"] * 4


def test_list_json_has_settings_and_a_count_for_every_status(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    (queue,) = parse_json(cli("queues", "list", "--json"))["queues"]
    assert queue == {
        "name": "media",
        "mode": "strict_fifo",
        "max_concurrent": None,
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "pause_reason": None,
        "has_row": False,
        "counts": {status.value: int(status is JobStatus.PENDING) for status in JobStatus},
        "claimed": 0,
        "total": 1,
    }


def test_pause_stops_dispatch_and_resume_restarts_it(cli: Cli, db: Db) -> None:
    job = db.enqueue(queue="media")
    result = cli("queues", "pause", "media")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().startswith("queue 'media': paused (0s ago by ")
    assert result.stdout.strip().endswith("), mode strict_fifo, max_concurrent unlimited")
    worker = uuid4()
    assert db.claim(worker, "media") == []
    assert cli("queues", "resume", "media").exit_code == 0
    assert [row.id for row in db.claim(worker, "media")] == [job.id]


def test_set_mode_changes_the_queue_row(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    assert cli("queues", "set-mode", "media", "round_robin").exit_code == 0
    queue = db.call(lambda b: b.get_queue("media"))
    assert queue is not None and queue.mode == "round_robin"


def test_set_max_concurrent_caps_dispatch_and_clear_removes_the_cap(cli: Cli, db: Db) -> None:
    for _ in range(3):
        db.enqueue(queue="media")
    assert cli("queues", "set-max-concurrent", "media", "1").exit_code == 0
    assert len(db.claim(uuid4(), "media", limit=3)) == 1
    result = cli("queues", "set-max-concurrent", "media", "--clear")
    assert "max_concurrent unlimited" in result.stdout
    assert len(db.claim(uuid4(), "media", limit=3)) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["set-mode", "media", "fifo"], "invalid queue mode 'fifo'"),
        (["set-max-concurrent", "media"], "give either N or --clear"),
        (["set-max-concurrent", "media", "2", "--clear"], "give either N or --clear"),
        (["set-max-concurrent", "media", str(2**31)], "out of range"),
        (["set-max-concurrent", "media", "-1"], "N: -1 is out of range (0..2147483647)"),
        (["pause", "medai"], "unknown queue 'medai' (known: 'media')"),
        (["pause", "x\ny", "--create"], "control characters"),
    ],
)
def test_queue_commands_reject_bad_input_and_change_nothing(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    db.enqueue(queue="media")
    assert expected in one_error_line(cli("queues", *args))
    assert db.count("queues") == 0


def test_create_configures_a_queue_before_its_first_job(cli: Cli, db: Db) -> None:
    result = cli("queues", "pause", "reports", "--create")
    assert result.exit_code == 0, result.stderr
    queue = db.call(lambda b: b.get_queue("reports"))
    assert queue is not None and queue.paused and queue.has_row
    assert cli("queues", "set-mode", "reports", "round_robin").exit_code == 0


def test_pause_records_who_when_and_why_and_list_shows_it(cli: Cli, db: Db) -> None:
    import getpass
    import socket

    db.enqueue(queue="media")
    operator = f"{getpass.getuser()}@{socket.gethostname()}"
    result = cli("queues", "pause", "media", "--reason", "db maintenance")
    assert result.exit_code == 0, result.stderr
    assert f"by {operator}: db maintenance" in result.stdout
    row = db.call(lambda b: b.get_queue("media"))
    assert row is not None and row.pause is not None
    assert (row.pause.paused_by, row.pause.reason) == (operator, "db maintenance")
    (queue,) = parse_json(cli("queues", "list", "--json"))["queues"]
    assert (queue["paused_by"], queue["pause_reason"]) == (operator, "db maintenance")
    assert "T" in queue["paused_at"]
    listed = cli("queues", "list", "-o", "wide")
    assert f"yes, 0s ago by {operator}: db maintenance" in listed.stdout
    cli("queues", "resume", "media")
    (queue,) = parse_json(cli("queues", "list", "--json"))["queues"]
    assert (queue["paused"], queue["paused_by"], queue["pause_reason"]) == (False, None, None)


def test_a_zero_cap_needs_yes_and_points_at_pause(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    refused = cli("queues", "set-max-concurrent", "media", "0")
    assert refused.exit_code == 1
    assert "taskq queues pause media --reason" in refused.stderr and "--yes" in refused.stderr
    assert len(db.claim(uuid4(), "media")) == 1  # no cap was set: the job still starts


def test_a_zero_cap_says_what_it_means(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    result = cli("queues", "set-max-concurrent", "media", "0", "--yes")
    assert result.exit_code == 0, result.stderr
    assert "max_concurrent 0 (none of its jobs start until the cap is raised or cleared)" in (
        result.stdout
    )
    assert db.claim(uuid4(), "media") == []


def test_pause_and_resume_go_to_the_operator_log_with_who_and_why(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    assert cli("queues", "pause", "media", "--reason", "db maintenance").exit_code == 0
    resumed = cli("queues", "resume", "media", "--reason", "maintenance done")
    assert resumed.exit_code == 0, resumed.stderr
    assert cli("queues", "set-max-concurrent", "media", "3").exit_code == 0
    logged = db.call(lambda b: b.list_operator_log(action="queue_update", target="media"))
    capped, resume, pause = logged
    me = f"{getpass.getuser()}@{socket.gethostname()}"
    assert (pause.by, pause.reason, pause.detail) == (
        me,
        "db maintenance",
        {"changed": {"paused": {"from": False, "to": True}}},
    )
    assert (resume.by, resume.reason, resume.detail) == (
        me,
        "maintenance done",
        {"changed": {"paused": {"from": True, "to": False}}},
    )
    assert capped.detail == {"changed": {"max_concurrent": {"from": None, "to": 3}}}
    assert capped.reason is None


def test_pausing_a_paused_queue_keeps_the_first_note_unless_forced(cli: Cli, db: Db) -> None:
    db.enqueue(queue="media")
    assert cli("queues", "pause", "media", "--reason", "disk full").exit_code == 0
    again = cli("queues", "pause", "media", "--reason", "deploy")
    assert again.exit_code == 0, again.stderr
    assert "already paused" in again.stderr and "--force" in again.stderr
    assert cli("queues", "list", "--json").stdout.count("disk full") == 1
    forced = cli("queues", "pause", "media", "--reason", "deploy", "--force")
    assert forced.exit_code == 0, forced.stderr
    listed = cli("queues", "list", "--json").stdout
    assert "deploy" in listed and "disk full" not in listed
