"""`taskq jobs list|show|explain`: the fields operators need, the JSON scripts parse."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import Start
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]

SUMMARY_FIELDS = {
    "id",
    "actor",
    "queue",
    "status",
    "priority",
    "attempt",
    "attempts_used",
    "attempts_spent",
    "max_attempts",
    "attempt_budget",
    "retry_kind",
    "created_at",
    "scheduled_at",
    "claimed",
    "claimed_at",
    "started_at",
    "finished_at",
    "updated_at",
    "locked_by_worker",
    "lock_expires_at",
    "identity_key",
    "fairness_key",
    "schedule_to_close",
    "cancel_phase",
    "cancel_requested_at",
    "cancel_reason",
    "error_class",
    "error_message",
}


# --- jobs list ----------------------------------------------------------------------------------


def test_a_claimed_job_is_listed_as_claimed_until_its_body_starts(cli: Cli, db: Db) -> None:
    worker = db.register_worker(["media"], ["resize"])
    claimed = db.enqueue("resize", queue="media")
    [row] = db.claim(worker, queue="media")
    assert row.id == claimed.id and row.started_at is None
    listed = cli("jobs", "list")
    assert listed.stdout.splitlines()[1].split()[3:5] == ["claimed", "0/3"]
    shown = cli("jobs", "show", str(claimed.id))
    assert "claimed: waiting for a free consumer, its body has not started" in shown.stdout
    assert "#1 claimed, its body not started; 0 of 3 used" in shown.stdout
    workers = cli("workers", "list")
    assert "0/4 +1 claimed" in workers.stdout, workers.stdout
    queues = cli("queues", "list")
    assert "0 +1 claimed" in queues.stdout, queues.stdout
    (row,) = parse_json(cli("jobs", "list", "--json"))["jobs"]
    assert row["status"] == "running" and row["claimed"] is True
    assert (row["attempt"], row["attempts_used"], row["attempts_spent"]) == (1, 1, 0)
    explained = cli("jobs", "explain", str(claimed.id)).stdout.splitlines()
    assert explained[0].endswith(f"is claimed by worker {worker}, waiting for a free consumer")
    assert explained[1].startswith("claimed: it is claimed by")
    db.call(lambda b: b.mark_started_many(worker, [Start(claimed.id, 1)]))
    assert cli("jobs", "list").stdout.splitlines()[1].split()[3:5] == ["running", "1/3"]
    assert " is running" in cli("jobs", "explain", str(claimed.id)).stdout


def test_list_shows_the_fields_an_operator_needs_first(cli: Cli, db: Db) -> None:
    failed = db.failed_job("resize", queue="media")
    pending = db.enqueue("email", queue="mail")
    result = cli("jobs", "list")
    assert result.exit_code == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["id", "actor", "queue", "status", "attempt", "age", "error"]
    assert lines[0].split()[:5] == [str(pending.id), "email", "mail", "pending", "0/3"]
    assert lines[1].split()[:5] == [str(failed.id), "resize", "media", "failed", "1/1"]
    assert lines[1].endswith("ValueError: boom")  # the message, not only the class


def test_list_json_has_the_documented_fields_and_iso_times(cli: Cli, db: Db) -> None:
    job = db.enqueue("email", queue="mail", priority=3)
    document = parse_json(cli("jobs", "list", "--json"))
    assert document["count"] == 1
    (row,) = document["jobs"]
    assert set(row) == SUMMARY_FIELDS
    assert (row["id"], row["actor"], row["status"], row["priority"]) == (
        str(job.id),
        "email",
        "pending",
        3,
    )
    assert datetime.fromisoformat(row["created_at"]) == job.created_at


def test_list_filters_by_status_queue_and_actor(cli: Cli, db: Db) -> None:
    failed = db.failed_job("resize", queue="media")
    media = db.enqueue("resize", queue="media")
    db.enqueue("email", queue="mail")
    cancelled = db.enqueue("resize", queue="media")
    db.call(lambda b: b.write_cancel_request(cancelled.id, None))

    def ids(*args: str) -> set[str]:
        return {row["id"] for row in parse_json(cli("jobs", "list", "--json", *args))["jobs"]}

    assert ids("--queue", "media") == {str(failed.id), str(media.id), str(cancelled.id)}
    assert ids("--status", "failed", "--status", "cancelled") == {
        str(failed.id),
        str(cancelled.id),
    }
    assert ids("--status", "failed,pending", "--actor", "resize") == {str(failed.id), str(media.id)}
    assert ids("--actor", "nobody") == set()


def test_list_limit_keeps_the_newest_and_says_there_may_be_more(cli: Cli, db: Db) -> None:
    jobs = [db.enqueue() for _ in range(3)]
    result = cli("jobs", "list", "--limit", "2")
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == [
        str(jobs[2].id),
        str(jobs[1].id),
    ]
    assert "showing 2 of 3; next page: --cursor " in result.stderr


def test_an_empty_list_says_so_on_stderr_only(cli: Cli) -> None:
    result = cli("jobs", "list", "--queue", "empty")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no jobs match" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "done"], "unknown status 'done'"),
        (["--limit", "0"], "--limit: 0 is out of range"),
    ],
)
def test_list_rejects_bad_filters_in_one_line(cli: Cli, args: list[str], expected: str) -> None:
    assert expected in one_error_line(cli("jobs", "list", *args))


# --- jobs show ----------------------------------------------------------------------------------


def test_show_has_the_row_every_attempt_and_the_timeline(cli: Cli, db: Db) -> None:
    job = db.failed_job("resize", queue="media")
    result = cli("jobs", "show", str(job.id))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"id              {job.id}" in out
    assert "status          failed" in out
    assert "error           ValueError: boom" in out
    assert "attempts" in out and "failed" in out
    assert "pending -> running" in out and "running -> failed" in out
    assert "Traceback: boom" in out


def test_show_json_has_job_attempts_and_events(cli: Cli, db: Db) -> None:
    job = db.failed_job()
    document = parse_json(cli("jobs", "show", str(job.id), "--json"))
    assert set(document) == {
        "job", "progress", "archived", "batch", "workflow", "attempts", "events",
    }  # fmt: skip
    assert document["archived"] is None and document["batch"] is None
    assert document["workflow"] is None
    assert document["progress"] is None
    assert SUMMARY_FIELDS <= set(document["job"])
    assert {"payload", "result", "error_traceback", "metadata"} <= set(document["job"])
    (attempt,) = document["attempts"]
    assert attempt["outcome"] == "failed"
    assert attempt["error_class"] == "ValueError"
    assert set(attempt) >= {"attempt", "worker_id", "duration_ms", "started_at", "finished_at"}
    assert [(e["from_status"], e["to_status"]) for e in document["events"]] == [
        ("pending", "running"),
        ("running", "failed"),
    ]
    assert all("T" in e["occurred_at"] for e in document["events"])


def test_show_of_an_unknown_id_is_one_line(cli: Cli) -> None:
    unknown = uuid4()
    assert f"no job with id {unknown}" in one_error_line(cli("jobs", "show", str(unknown)))
    assert "is not a job id" in one_error_line(cli("jobs", "show", "nope"))
    assert "no job id starts or ends with '42'" in one_error_line(cli("jobs", "show", "42"))


def test_show_finds_an_archived_job_and_says_its_events_were_deleted(cli: Cli, db: Db) -> None:
    job = db.failed_job("resize", queue="media")
    db.archive(job)
    result = cli("jobs", "show", str(job.id))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    (archived,) = db.sql("SELECT archived_at, expire_at FROM {schema}.jobs_archive")
    archived_at, expire_at = (
        archived[k].isoformat(timespec="seconds") for k in ("archived_at", "expire_at")
    )
    assert lines[0] == (
        f"ARCHIVED: moved to the archive at {archived_at}; deleted for good at {expire_at}"
    )
    assert "status          failed (archived)" in result.stdout
    assert "error           ValueError: boom" in result.stdout
    assert "attempts" in result.stdout and "failed" in result.stdout
    assert "events: deleted when the job was archived (by design" in result.stdout
    assert "pending -> running" not in result.stdout


def test_show_json_of_an_archived_job_has_the_archived_field(cli: Cli, db: Db) -> None:
    job = db.failed_job()
    db.archive(job)
    document = parse_json(cli("jobs", "show", str(job.id), "--json"))
    assert document["job"]["id"] == str(job.id) and document["job"]["status"] == "failed"
    archived = document["archived"]
    assert archived["events_deleted"] is True
    assert datetime.fromisoformat(archived["expire_at"]) - datetime.fromisoformat(
        archived["archived_at"]
    ) == timedelta(days=365)
    assert [a["outcome"] for a in document["attempts"]] == ["failed"]
    assert document["events"] == []


# --- jobs explain -------------------------------------------------------------------------------


def test_explain_of_an_archived_job_says_it_is_archived_and_nothing_runs_it(
    cli: Cli, db: Db
) -> None:
    job = db.succeeded_job()
    db.archive(job)
    result = cli("jobs", "explain", str(job.id))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"job {job.id} (actor 'work', queue 'default') is succeeded (archived)"
    assert lines[1].startswith("archived: it is archived: it succeeded at ")
    assert "moved it to the archive at" in lines[1] and "nothing will run it" in lines[1]
    assert "its events were deleted when it was archived" in lines[1]

    document = parse_json(cli("jobs", "explain", str(job.id), "--json"))
    assert document["situation"] == "archived" and document["archived"] is True
    assert document["verdict"]["code"] == "archived"
    assert document["now"] is None
    assert {"archived_at", "expire_at", "finished_at"} <= set(document["verdict"]["facts"])


def test_explain_names_the_paused_queue_and_lists_every_check(cli: Cli, db: Db) -> None:
    db.register_worker(["media"], ["resize"])
    job = db.enqueue("resize", queue="media")
    assert cli("queues", "pause", "media").exit_code == 0
    result = cli("jobs", "explain", str(job.id))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"job {job.id} (actor 'resize', queue 'media') is pending"
    assert lines[1].startswith("blocked: queue 'media' is paused")
    assert any(line.split()[:2] == ["BLOCKS", "queue_paused"] for line in lines)
    assert any(line.split()[:2] == ["ok", "no_live_worker"] for line in lines)


def test_explain_json_names_the_actor_cap_and_its_running_jobs(cli: Cli, db: Db) -> None:
    worker = db.register_worker(["default"], ["work"])
    db.register_actor("work", max_concurrent=1)
    db.enqueue()
    (running,) = db.claim(worker)
    waiting = db.enqueue()
    document = parse_json(cli("jobs", "explain", str(waiting.id), "--json"))
    assert document["job_id"] == str(waiting.id)
    assert document["situation"] == "waiting"
    verdict = document["verdict"]
    assert verdict["code"] == "actor_capacity_full"
    assert verdict["facts"] == {"max_concurrent": 1, "running_job_ids": [str(running.id)]}
    assert str(running.id) in verdict["message"]
    assert [c["code"] for c in document["checks"] if c["applies"]] == ["actor_capacity_full"]
    assert datetime.fromisoformat(document["now"]) >= waiting.created_at


def test_explain_names_the_reclaim_time_of_a_job_on_a_stale_worker(cli: Cli, db: Db) -> None:
    worker = db.register_worker(["default"], ["work"])
    db.enqueue()
    (running,) = db.claim(worker)
    db.sql("UPDATE {schema}.workers SET last_seen_at = last_seen_at - interval '5 minutes'")
    result = cli("jobs", "explain", str(running.id), "--json")
    verdict = parse_json(result)["verdict"]
    assert verdict["code"] == "worker_stale"
    assert "last seen 5m" in verdict["message"]
    assert "reclaim due at" in verdict["message"]
    assert running.lock_expires_at is not None
    assert datetime.fromisoformat(verdict["facts"]["reclaim_at"]) == running.lock_expires_at


def test_explain_of_a_failed_job_names_the_error_and_attempts(cli: Cli, db: Db) -> None:
    job = db.failed_job()
    result = cli("jobs", "explain", str(job.id))
    assert result.exit_code == 0
    assert "finished: it failed" in result.stdout
    assert "last error ValueError: boom; 1 of 1 attempt(s) used" in result.stdout


def test_explain_of_a_scheduled_job_names_its_time(cli: Cli, db: Db) -> None:
    job = db.enqueue(delay=timedelta(hours=2))
    assert job.status is JobStatus.SCHEDULED
    verdict = parse_json(cli("jobs", "explain", str(job.id), "--json"))["verdict"]
    assert verdict["code"] == "scheduled"
    assert "in 1h59m" in verdict["message"] or "in 2h" in verdict["message"]


def test_explain_of_an_unknown_job_is_one_line(cli: Cli) -> None:
    assert "no job with id" in one_error_line(cli("jobs", "explain", str(uuid4())))


@pytest.mark.slow
def test_colours_follow_the_terminal_and_no_color(db: Db, pg: PgTarget) -> None:
    import pexpect

    db.failed_job()

    def on_a_terminal(**env: str) -> str:
        base = {k: v for k, v in pg.env().items() if k != "NO_COLOR"}
        child = pexpect.spawn(
            TASKQ_BIN,
            ["jobs", "list"],
            env={**base, "TERM": "xterm-256color", **env},
            encoding="utf-8",
            dimensions=(40, 200),
            timeout=30,
        )
        text: str = child.read()
        child.wait()
        return text

    assert "\x1b[31mfailed" in on_a_terminal()  # red on a terminal
    assert "\x1b[31m" not in on_a_terminal(NO_COLOR="1")


def test_a_non_retryable_job_shows_a_budget_of_one(cli: Cli, db: Db) -> None:
    job = db.enqueue(retry_kind="non_retryable", max_attempts=3)
    listed = cli("jobs", "list")
    row = next(line for line in listed.stdout.splitlines() if str(job.id)[:8] in line)
    assert " 0/1 " in f" {row} " and "/3" not in row
    shown = cli("jobs", "show", str(job.id))
    assert "0 of 1 used (non_retryable)" in shown.stdout
    document = parse_json(cli("jobs", "show", str(job.id), "--json"))
    assert document["job"]["max_attempts"] == 3  # the JSON keeps the stored row as it is
