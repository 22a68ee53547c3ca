"""`taskq cancel` and `taskq retry`: one job or a filter; bulk asks on a terminal and needs
--yes in a script."""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


# --- cancel one ---------------------------------------------------------------------------------


def test_cancelling_a_waiting_job_cancels_it_at_once_with_the_reason(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    result = cli("cancel", str(job.id), "--reason", "duplicate")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"cancelled {job.id}"
    row = db.get(job.id)
    assert (row.status, row.cancel_reason) == (JobStatus.CANCELLED, "duplicate")
    assert [e.kind for e in db.call(lambda b: b.get_events(job.id))] == ["cancel_request"]


def test_cancelling_a_running_job_asks_its_worker(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    db.claim(uuid4())
    result = cli("cancel", str(job.id))
    assert result.exit_code == 0
    assert "asked" in result.stdout and "cooperatively" in result.stdout
    row = db.get(job.id)
    assert (row.status, row.cancel_phase) == (JobStatus.RUNNING, 1)
    again = cli("cancel", str(job.id))
    assert again.exit_code == 0 and "already stopping" in again.stdout


def test_cancelling_a_finished_job_is_an_error_but_a_cancelled_one_is_not(cli: Cli, db: Db) -> None:
    failed = db.failed_job()
    line = one_error_line(cli("cancel", str(failed.id)))
    assert f"job {failed.id} is failed: there is nothing to cancel" in line
    assert db.get(failed.id).status is JobStatus.FAILED
    job = db.enqueue()
    assert cli("cancel", str(job.id)).exit_code == 0
    again = cli("cancel", str(job.id))
    assert again.exit_code == 0 and "already cancelled" in again.stdout


def test_cancelling_an_unknown_job_is_one_line(cli: Cli) -> None:
    unknown = uuid4()
    assert f"no job with id {unknown}" in one_error_line(cli("cancel", str(unknown)))
    assert "is not a job id" in one_error_line(cli("cancel", "nope"))


# --- cancel many --------------------------------------------------------------------------------


def test_bulk_cancel_without_yes_counts_and_changes_nothing(cli: Cli, db: Db) -> None:
    for _ in range(3):
        db.enqueue(queue="media")
    db.enqueue(queue="other")
    line = one_error_line(cli("cancel", "--queue", "media"))
    assert "cancel would affect 3 job(s)" in line and "--yes" in line
    assert {job.status for job in db.jobs()} == {JobStatus.PENDING}


@pytest.mark.slow
def test_bulk_cancel_on_a_terminal_asks_and_does_what_the_answer_says(db: Db, pg: PgTarget) -> None:
    import pexpect

    for _ in range(2):
        db.enqueue(queue="media")

    def answer(reply: str) -> tuple[int, str]:
        child = pexpect.spawn(
            TASKQ_BIN, ["cancel", "--queue", "media"], env=pg.env(), encoding="utf-8", timeout=30
        )
        child.expect(r"Cancel 2 job\(s\) \(.*\)\? \[y/N\]")
        child.sendline(reply)
        text: str = child.read()
        child.wait()
        return int(child.exitstatus), text

    declined, text = answer("n")
    assert declined == 1 and "nothing was changed" in text
    assert {job.status for job in db.jobs()} == {JobStatus.PENDING}
    accepted, text = answer("y")
    assert accepted == 0, text
    assert {job.status for job in db.jobs()} == {JobStatus.CANCELLED}


def test_bulk_cancel_with_yes_cancels_exactly_the_matches(cli: Cli, db: Db) -> None:
    first, second, third = (db.enqueue(queue="media") for _ in range(3))
    other_actor = db.enqueue("email", queue="media")
    other_queue = db.enqueue(queue="other")
    (running,) = db.claim(uuid4(), "media", limit=1)
    assert running.id == first.id
    result = cli("cancel", "--queue", "media", "--actor", "work", "--yes", "--reason", "flood")
    assert result.exit_code == 0, result.stderr
    assert "cancelled 2 waiting job(s); asked 1 running job(s) to stop" in result.stdout
    assert (db.get(first.id).status, db.get(first.id).cancel_phase) == (JobStatus.RUNNING, 1)
    assert db.get(second.id).status is JobStatus.CANCELLED
    assert db.get(third.id).cancel_reason == "flood"
    assert db.get(other_actor.id).status is JobStatus.PENDING
    assert db.get(other_queue.id).status is JobStatus.PENDING


def test_bulk_cancel_by_status_leaves_other_statuses(cli: Cli, db: Db) -> None:
    scheduled = db.enqueue(queue="media", delay=timedelta(hours=1))
    pending = db.enqueue(queue="media")
    result = cli("cancel", "--queue", "media", "--status", "scheduled", "--yes")
    assert "cancelled 1 waiting job(s)" in result.stdout
    assert db.get(scheduled.id).status is JobStatus.CANCELLED
    assert db.get(pending.id).status is JobStatus.PENDING


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "give a job id, or --queue"),
        (["--status", "pending", "--yes"], "give a job id, or --queue"),
        (["--queue", "q", "--status", "failed"], "'failed' is not allowed here"),
    ],
)
def test_bulk_cancel_needs_a_meaningful_filter(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    db.enqueue(queue="q")
    assert expected in one_error_line(cli("cancel", *args))
    assert db.jobs()[0].status is JobStatus.PENDING


def test_an_id_and_a_filter_together_are_refused(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    assert "not both" in one_error_line(cli("cancel", str(job.id), "--queue", "default"))
    assert db.get(job.id).status is JobStatus.PENDING


# --- retry --------------------------------------------------------------------------------------


def test_retrying_a_failed_job_re_pends_it_with_a_fresh_budget(cli: Cli, db: Db) -> None:
    job = db.failed_job()
    result = cli("retry", str(job.id))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"re-pended {job.id}"
    row = db.get(job.id)
    assert (row.status, row.attempts_used, row.error_class) == (JobStatus.PENDING, 0, None)
    detail = db.call(lambda b: b.get_events(job.id))[-1].detail
    assert detail["reason"] == "operator_retry"
    assert detail["by"].endswith(f"@{socket.gethostname()}")  # who retried it


def test_retrying_a_job_that_is_not_finished_is_one_line(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    line = one_error_line(cli("retry", str(job.id)))
    assert f"job {job.id} is pending: only failed, cancelled, crashed jobs can be retried" in line
    assert "no job with id" in one_error_line(cli("retry", str(uuid4())))


def test_bulk_retry_without_yes_counts_and_changes_nothing(cli: Cli, db: Db) -> None:
    jobs = [db.failed_job() for _ in range(2)]
    line = one_error_line(cli("retry", "--status", "failed"))
    assert "retry would affect 2 job(s) (status failed)" in line
    assert {db.get(job.id).status for job in jobs} == {JobStatus.FAILED}


def test_bulk_retry_with_yes_re_pends_exactly_the_matches(cli: Cli, db: Db) -> None:
    media = db.failed_job(queue="media")
    other = db.failed_job(queue="other")
    cancelled = db.enqueue(queue="media")
    db.call(lambda b: b.write_cancel_request(cancelled.id, None))
    result = cli("retry", "--status", "failed", "--queue", "media", "--yes")
    assert result.exit_code == 0, result.stderr
    assert "re-pended 1 job(s) (status failed, queue 'media')" in result.stdout
    assert db.get(media.id).status is JobStatus.PENDING
    assert db.get(other.id).status is JobStatus.FAILED
    assert db.get(cancelled.id).status is JobStatus.CANCELLED


def test_bulk_retry_requires_a_retryable_status(cli: Cli) -> None:
    assert "--status failed|crashed|cancelled" in one_error_line(
        cli("retry", "--queue", "q", "--yes")
    )
    assert "not allowed here" in one_error_line(cli("retry", "--status", "pending", "--yes"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["cancel", "--queue", "medai", "--yes"], "unknown queue 'medai' (known: 'media')"),
        (["cancel", "--actor", "ghost"], "unknown actor 'ghost'"),
        (["retry", "--status", "failed", "--queue", "medai", "--yes"], "unknown queue 'medai'"),
    ],
)
def test_bulk_filters_naming_an_unknown_queue_or_actor_are_errors(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    job = db.enqueue(queue="media")
    assert expected in one_error_line(cli(*args))
    assert db.get(job.id).status is JobStatus.PENDING
