"""`taskq jobs requeue|fail|move|purge`: fixing stuck work from the shell, and the audit trail
(who and why) that every operator write leaves for `jobs show`."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import Start
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]
LEASE = timedelta(seconds=30)


def _me() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def _running(db: Db, queue: str = "default", **fields: object) -> tuple[str, object]:
    """A job whose body runs on a worker; returns its id and the worker's lease."""
    job = db.enqueue(queue=queue, **fields)
    worker = uuid4()
    [claimed] = db.claim(worker, queue)
    assert claimed.id == job.id
    db.call(lambda b: b.mark_started_many(worker, [Start(job.id, claimed.attempt)]))
    row = db.get(job.id)
    return str(job.id), row.lease()


# --- requeue and fail ------------------------------------------------------------------------
def test_requeue_pends_a_running_job_and_its_worker_loses_the_lease(cli: Cli, db: Db) -> None:
    ident, old = _running(db)

    result = cli("jobs", "requeue", ident[-12:], "--reason", "wedged on a lock")

    assert result.exit_code == 0, result.stderr
    assert f"requeued {ident}: pending, due now" in result.stdout
    assert "lost its lease" in result.stdout
    row = db.get(ident)
    assert (row.status, row.locked_by_worker, row.error_class) == (
        JobStatus.PENDING,
        None,
        "OperatorRequeued",
    )
    # The worker that still runs the body finishes late: its write changes nothing.
    assert db.call(lambda b: b.mark_succeeded(old, {"late": True})) is False
    assert db.get(ident).status is JobStatus.PENDING

    shown = cli("jobs", "show", ident)
    assert shown.exit_code == 0, shown.stderr
    assert f"{_me()}: wedged on a lock" in shown.stdout
    assert "operator_requeue" in shown.stdout


def test_requeue_json_says_what_changed(cli: Cli, db: Db) -> None:
    ident, old = _running(db)
    document = parse_json(cli("jobs", "requeue", ident, "--json"))
    assert document["job_id"] == ident and document["action"] == "requeue"
    assert document["status"] == "pending" and document["by"] == _me()
    assert document["changed"]["status"] == {"from": "running", "to": "pending"}
    assert document["changed"]["locked_by_worker"]["to"] is None
    assert document["previous_worker"] == str(old.worker_id)  # type: ignore[attr-defined]


def test_requeue_on_the_last_attempt_says_it_crashed_and_how_to_retry(cli: Cli, db: Db) -> None:
    ident, _ = _running(db, max_attempts=1)
    result = cli("jobs", "requeue", ident)
    assert result.exit_code == 0, result.stderr
    assert "last attempt (1/1)" in result.stdout and f"taskq retry {ident}" in result.stdout
    assert db.get(ident).status is JobStatus.CRASHED


def test_fail_ends_a_running_job_failed_with_who_and_why(cli: Cli, db: Db) -> None:
    ident, old = _running(db)

    result = cli("jobs", "fail", ident, "--reason", "poison payload")

    assert result.exit_code == 0, result.stderr
    assert f"failed {ident}" in result.stdout
    row = db.get(ident)
    assert row.status is JobStatus.FAILED
    assert row.error_message == f"failed by {_me()}: poison payload"
    assert db.call(lambda b: b.mark_succeeded(old, {"late": True})) is False
    event = db.call(lambda b: b.get_events(row.id))[-1]
    assert event.detail == {"reason": "operator_fail", "by": _me(), "why": "poison payload"}


def test_requeue_or_fail_of_a_job_that_is_not_running_is_one_line(cli: Cli, db: Db) -> None:
    waiting = db.enqueue()
    line = one_error_line(cli("jobs", "requeue", str(waiting.id)))
    assert f"job {waiting.id} is pending: only a running job can be requeued" in line
    failed = db.failed_job()
    line = one_error_line(cli("jobs", "requeue", str(failed.id)))
    assert "taskq retry re-pends a finished one" in line
    line = one_error_line(cli("jobs", "fail", str(waiting.id)))
    assert "cancel it instead" in line
    assert "no job with id" in one_error_line(cli("jobs", "fail", str(uuid4())))
    assert db.get(waiting.id).status is JobStatus.PENDING


# --- move --------------------------------------------------------------------------------------
def test_move_one_waiting_job_to_another_queue(cli: Cli, db: Db) -> None:
    job = db.enqueue(queue="default")
    result = cli("jobs", "move", str(job.id), "--to", "media", "--reason", "wrong queue")
    assert result.exit_code == 0, result.stderr
    assert f"moved {job.id} from 'default' to 'media'" in result.stdout
    assert db.get(job.id).queue == "media"
    event = db.call(lambda b: b.get_events(job.id))[-1]
    assert (event.kind, event.detail["by"], event.detail["why"]) == (
        "queue_move",
        _me(),
        "wrong queue",
    )
    ident, _ = _running(db)
    line = one_error_line(cli("jobs", "move", ident, "--to", "media"))
    assert "only waiting jobs (pending, scheduled) can move" in line


def test_bulk_move_needs_yes_and_moves_only_waiting_jobs(cli: Cli, db: Db) -> None:
    running, _ = _running(db, queue="default")
    waiting = [db.enqueue(queue="default") for _ in range(2)]
    later = db.enqueue(queue="default", delay=timedelta(hours=1))

    line = one_error_line(cli("jobs", "move", "--queue", "default", "--to", "media"))
    assert "move would take 3 job(s)" in line and "--yes" in line
    assert {j.queue for j in db.jobs()} == {"default"}

    document = parse_json(
        cli("jobs", "move", "--queue", "default", "--to", "media", "--yes", "--json")
    )
    assert document["moved"] == 3 and document["to_queue"] == "media"
    assert {db.get(j.id).queue for j in (*waiting, later)} == {"media"}
    assert db.get(running).queue == "default"
    assert "give --to QUEUE" in one_error_line(cli("jobs", "move", "--queue", "default"))
    assert "unknown queue 'nope'" in one_error_line(
        cli("jobs", "move", "--queue", "nope", "--to", "media", "--yes")
    )


@pytest.mark.parametrize(
    ("args", "question"),
    [
        (["move", "--queue", "default", "--to", "media"], r"Move 2 job\(s\) .* to 'media'\?"),
        (["purge", "--queue", "default"], r"Delete 2 job\(s\) .* for good\?"),
    ],
)
def test_a_filters_move_or_purge_asks_on_a_terminal(
    db: Db, pg: PgTarget, args: list[str], question: str
) -> None:
    """As bulk cancel and retry and taskq prune: no (the default) changes nothing, yes does."""
    import pexpect

    for _ in range(2):
        db.enqueue(queue="default")
    for answer, left in (("", 2), ("y", 0)):
        child = pexpect.spawn(
            TASKQ_BIN, ["jobs", *args], env=pg.env(), encoding="utf-8", timeout=30
        )
        child.expect(question + r" \[y/N\]")
        child.sendline(answer)
        text: str = child.read()
        child.wait()
        assert child.exitstatus == (1 if answer == "" else 0), text
        assert len([j for j in db.jobs() if j.queue == "default"]) == left, text


# --- purge -------------------------------------------------------------------------------------
def test_purge_dry_run_counts_and_yes_deletes_leaving_running_jobs(cli: Cli, db: Db) -> None:
    running, _ = _running(db, queue="media")
    failed = db.failed_job(queue="media")
    waiting = db.enqueue(queue="media")
    other = db.enqueue(queue="default")

    dry = cli("jobs", "purge", "--queue", "media", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "would delete 2 job(s): 1 pending, 1 failed" in dry.stdout
    assert "1 running job(s) match and are left alone" in dry.stderr
    assert db.count("jobs") == 4

    line = one_error_line(cli("jobs", "purge", "--queue", "media"))
    assert "purge would delete 2 job(s)" in line and "--dry-run" in line and "--yes" in line

    document = parse_json(
        cli("jobs", "purge", "--queue", "media", "--yes", "--reason", "test data", "--json")
    )
    assert document["deleted"] == {"pending": 1, "failed": 1}
    assert document["total"] == 2 and document["running_skipped"] == 1
    assert {j.id for j in db.jobs()} == {db.get(running).id, other.id}
    events = db.sql("SELECT count(*) FROM {schema}.job_events WHERE job_id = $1", failed.id)
    assert events[0][0] == 0
    [logged] = db.sql("SELECT action, by_operator, reason, detail FROM {schema}.operator_log")
    assert (logged["action"], logged["by_operator"], logged["reason"]) == (
        "purge",
        _me(),
        "test data",
    )
    assert waiting.id not in {j.id for j in db.jobs()}


def test_purge_refuses_running_jobs_and_an_empty_filter(cli: Cli, db: Db) -> None:
    line = one_error_line(cli("jobs", "purge", "--status", "running", "--yes"))
    assert "purge never deletes running jobs" in line
    line = one_error_line(cli("jobs", "purge", "--yes"))
    assert "purge never deletes every job" in line


# --- the audit trail of cancel and retry ------------------------------------------------------
def test_cancel_and_retry_record_who_and_why_in_the_events(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    assert cli("cancel", str(job.id), "--reason", "duplicate").exit_code == 0
    assert cli("retry", str(job.id), "--reason", "was not a duplicate").exit_code == 0
    cancel, retry = db.call(lambda b: b.get_events(job.id))
    assert cancel.detail == {"reason": "duplicate", "by": _me(), "why": "duplicate"}
    assert retry.detail == {
        "reason": "operator_retry",
        "by": _me(),
        "why": "was not a duplicate",
    }
    shown = cli("jobs", "show", str(job.id))
    assert f"{_me()}: was not a duplicate" in shown.stdout
    document = parse_json(cli("jobs", "show", str(job.id), "--json"))
    assert document["events"][-1]["detail"]["by"] == _me()
