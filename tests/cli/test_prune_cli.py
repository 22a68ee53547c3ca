"""``taskq prune``: what a dry run counts, what a real prune moves (the tables say so), the
filters, the JSON document, every bad input refused before anything moves, the cluster lock,
and the progress bar that shows only on a terminal."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import JobRow
from taskq_core.constants import PRUNE_LOCK
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

DAY = timedelta(days=1)


@dataclass(frozen=True)
class Jobs:
    """Terminal jobs on both sides of the default retentions (succeeded and cancelled 30d,
    failed 90d), and one that is still waiting."""

    succeeded_emails: JobRow  # 40d: due
    succeeded_media: JobRow  # 40d: due
    failed_young: JobRow  # 40d: kept (failed stay 90d)
    failed_old: JobRow  # 100d: due
    cancelled_media: JobRow  # 10d: kept
    pending: JobRow

    @property
    def due(self) -> set[str]:
        """Ids the default policy moves."""
        return {str(j.id) for j in (self.succeeded_emails, self.succeeded_media, self.failed_old)}


@pytest.fixture
def jobs(db: Db) -> Jobs:
    made = Jobs(
        succeeded_emails=db.succeeded_job(queue="emails"),
        succeeded_media=db.succeeded_job(queue="media"),
        failed_young=db.failed_job(queue="emails"),
        failed_old=db.failed_job(queue="emails"),
        cancelled_media=db.cancelled_job(queue="media"),
        pending=db.enqueue(queue="emails"),
    )
    db.finished_ago(made.succeeded_emails, 40 * DAY)
    db.finished_ago(made.succeeded_media, 40 * DAY)
    db.finished_ago(made.failed_young, 40 * DAY)
    db.finished_ago(made.failed_old, 100 * DAY)
    db.finished_ago(made.cancelled_media, 10 * DAY)
    return made


def ids(db: Db, table: str) -> set[str]:
    return {str(r["id"]) for r in db.sql(f"SELECT id FROM {{schema}}.{table}")}


def archived_counts(db: Db) -> dict[tuple[str, str], int]:
    rows = db.sql("SELECT status, queue, count(*) AS n FROM {schema}.jobs_archive GROUP BY 1, 2")
    return {(r["status"], r["queue"]): r["n"] for r in rows}


def printed_counts(document: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {(c["status"], c["queue"]): c["count"] for c in document["counts"]}


def table_rows(stdout: str) -> list[list[str]]:
    """The piped table's rows as words, from its header to its total."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["status", "queue"])
    rows = []
    for line in lines[start:]:
        rows.append(line.split())
        if rows[-1][0] == "total":
            return rows
    raise AssertionError(f"no total row in {stdout!r}")


def test_a_dry_run_counts_by_status_and_queue_and_moves_nothing(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    before = ids(db, "jobs")
    result = cli("prune", "--yes", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert table_rows(result.stdout) == [
        ["status", "queue", "would", "move"],
        ["succeeded", "emails", "1"],
        ["succeeded", "media", "1"],
        ["failed", "emails", "1"],
        ["total", "-", "3"],
    ]
    assert "dry run: 3 jobs would move to the archive; nothing was moved" in result.stdout
    assert ids(db, "jobs") == before
    assert db.count("jobs_archive") == 0 and db.count("job_attempts_archive") == 0


def test_a_prune_moves_exactly_the_due_jobs_and_prints_what_it_moved(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    before = ids(db, "jobs")
    attempts = db.count("job_attempts")
    result = cli("prune", "--yes")
    assert result.exit_code == 0, result.stderr
    assert table_rows(result.stdout)[1:] == [
        ["succeeded", "emails", "1"],
        ["succeeded", "media", "1"],
        ["failed", "emails", "1"],
        ["total", "-", "3"],
    ]
    assert "moved 3 jobs to the archive in 1 batch;" in result.stdout
    assert ids(db, "jobs_archive") == jobs.due
    assert ids(db, "jobs") == before - jobs.due
    assert archived_counts(db) == {
        ("succeeded", "emails"): 1,
        ("succeeded", "media"): 1,
        ("failed", "emails"): 1,
    }
    # Attempts moved with their jobs (a success's is on its row: the failure's is the one
    # stored), each read back; the moved jobs' events are gone, the others' stay.
    assert db.count("job_attempts_archive") == 1
    assert db.count("job_attempts") == attempts - 1
    for job_id in jobs.due:
        archived = db.call(lambda b, job_id=job_id: b.get_archived_attempts(UUID(job_id)))
        assert [a.attempt for a in archived] == [1], archived
    event_jobs = {str(r["job_id"]) for r in db.sql("SELECT job_id FROM {schema}.job_events")}
    assert not event_jobs & jobs.due
    assert str(jobs.failed_young.id) in event_jobs


def test_the_json_counts_match_the_archive_and_name_the_batches_and_policy(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    dry = parse_json(cli("prune", "--yes", "--dry-run", "--json"))
    assert dry["dry_run"] is True and dry["batches"] == 0 and dry["total"] == 3
    assert db.count("jobs_archive") == 0

    document = parse_json(cli("prune", "--yes", "--json", env={"TASKQ_PRUNE_BATCH_SIZE": "2"}))
    assert document["dry_run"] is False
    assert printed_counts(document) == printed_counts(dry) == archived_counts(db)
    assert document["total"] == 3
    assert document["batches"] == 2  # 2 + 1 with batches of 2
    assert document["policy"] == {
        "retention_seconds": {
            "succeeded": (30 * DAY).total_seconds(),
            "failed": (90 * DAY).total_seconds(),
            "cancelled": (30 * DAY).total_seconds(),
            "abandoned": (90 * DAY).total_seconds(),
            "crashed": (90 * DAY).total_seconds(),
        },
        "archive_for_seconds": (365 * DAY).total_seconds(),
        "batch_size": 2,
        "queue": None,
    }

    again = parse_json(cli("prune", "--yes", "--json"))
    assert again["total"] == 0 and again["counts"] == []


def test_the_prune_holds_its_lock_on_the_direct_dsn_not_the_pooled_one(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    # A transaction-mode PgBouncer would release a session advisory lock on another server
    # session: the prune connects directly. Here nothing listens on the pooled DSN at all.
    unreachable = {"TASKQ_PG_DSN_POOLED": "postgresql://postgres@127.0.0.1:1/postgres"}
    assert cli("jobs", "list", env=unreachable).exit_code == 1  # the pooled DSN is really used
    document = parse_json(cli("prune", "--yes", "--json", env=unreachable))
    assert document["total"] == 3 and ids(db, "jobs_archive") == jobs.due


def test_nothing_due_says_so(cli: Callable[..., CliResult], db: Db) -> None:
    db.succeeded_job()
    result = cli("prune", "--yes")
    assert result.exit_code == 0, result.stderr
    assert "nothing to prune: 0 jobs moved" in result.stdout
    assert db.count("jobs_archive") == 0


def test_status_and_older_than_narrow_the_prune(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    # Failed jobs finished more than 30 days ago: both failed ones, nothing else.
    document = parse_json(
        cli("prune", "--yes", "--status", "failed", "--older-than", "30d", "--json")
    )
    assert printed_counts(document) == {("failed", "emails"): 2}
    assert document["policy"]["retention_seconds"] == {"failed": (30 * DAY).total_seconds()}
    assert ids(db, "jobs_archive") == {str(jobs.failed_young.id), str(jobs.failed_old.id)}

    # Every terminal status, finished more than 5 days ago, in queue media only.
    document = parse_json(cli("prune", "--yes", "--older-than", "5d", "--queue", "media", "--json"))
    assert printed_counts(document) == {("succeeded", "media"): 1, ("cancelled", "media"): 1}
    assert str(jobs.succeeded_emails.id) in ids(db, "jobs")


def test_older_than_takes_a_past_timestamp(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    cutoff = (datetime.now(UTC) - 20 * DAY).isoformat(timespec="seconds")
    document = parse_json(cli("prune", "--yes", "--older-than", cutoff, "--json"))
    # Finished before the cutoff: everything but the cancelled job (10 days ago).
    assert document["total"] == 4
    assert str(jobs.cancelled_media.id) in ids(db, "jobs")
    assert str(jobs.cancelled_media.id) not in ids(db, "jobs_archive")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--older-than", "0"], "--older-than: must be longer than zero"),
        (["--older-than", "0s"], "--older-than: must be longer than zero"),
        (["--older-than", "-5m"], "--older-than: '-5m' is negative"),
        (["--older-than=-7d"], "--older-than: '-7d' is negative"),
        (["--older-than", "2999-01-01T00:00:00+00:00"], "is in the future"),
        (["--older-than", "2999-01-01"], "is in the future"),
        (["--older-than", "soon"], "--older-than: cannot read 'soon'"),
        (["--older-than", "5 parsecs"], "--older-than: cannot read"),
        (["--status", "pending"], "--status: 'pending' is not allowed here"),
        (["--status", "running"], "--status: 'running' is not allowed here"),
        (["--status", "bogus"], "--status:"),
        (["--queue", ""], "--queue: must not be empty"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_moves_nothing(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs, args: list[str], says: str
) -> None:
    before = ids(db, "jobs")
    line = one_error_line(cli("prune", "--yes", *args))
    assert says in line
    assert ids(db, "jobs") == before and db.count("jobs_archive") == 0


async def test_a_prune_refuses_while_another_holds_the_lock(pg: PgTarget) -> None:
    def prune_process() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TASKQ_BIN, "prune", "--yes"], env=pg.env(), capture_output=True, text=True, timeout=60
        )

    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    try:
        async with backend.sweep_lock(PRUNE_LOCK) as got:
            assert got
            refused = await asyncio.to_thread(prune_process)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.count("\n") == 1
        assert refused.stderr.startswith("error: another prune is running")
        # Once the holder lets go, the same command runs.
        ran = await asyncio.to_thread(prune_process)
        assert ran.returncode == 0, ran.stderr
    finally:
        await backend.close()


@pytest.mark.slow
def test_the_progress_bar_shows_on_a_terminal(db: Db, pg: PgTarget, jobs: Jobs) -> None:
    import pexpect

    env = {k: v for k, v in pg.env().items() if k != "NO_COLOR"}
    child = pexpect.spawn(
        TASKQ_BIN,
        ["prune"],
        env={**env, "TERM": "xterm-256color", "TASKQ_PRUNE_BATCH_SIZE": "1"},
        encoding="utf-8",
        dimensions=(40, 200),
        timeout=30,
    )
    child.expect(r"Move 3 jobs to the archive .*\[y/N\]")  # a terminal is asked first
    child.sendline("y")
    text: str = child.read()
    child.wait()
    assert child.exitstatus == 0, text
    assert "archiving" in text and "3/3" in text
    assert "moved 3 jobs to the archive in 4 batches" in text
    assert ids(db, "jobs_archive") == jobs.due


@pytest.mark.slow
def test_a_terminal_that_answers_no_archives_nothing(db: Db, pg: PgTarget, jobs: Jobs) -> None:
    import pexpect

    child = pexpect.spawn(
        TASKQ_BIN, ["prune", "--older-than", "1m"], env=pg.env(), encoding="utf-8", timeout=30
    )
    child.expect(r"Move \d+ jobs to the archive .*\[y/N\]")
    child.sendline("")  # the default is no
    text: str = child.read()
    child.wait()
    assert child.exitstatus == 1, text
    assert "nothing was changed" in text
    assert ids(db, "jobs_archive") == set()


def test_a_script_must_say_yes_and_nothing_moves_without_it(
    cli: Callable[..., CliResult], db: Db, jobs: Jobs
) -> None:
    # `--older-than 2m` typed for `2d`: without --yes it only says what it would have done.
    result = cli("prune", "--older-than", "2m")
    assert result.exit_code == 1
    assert "prune would move" in result.stderr and "re-run with --yes" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert ids(db, "jobs_archive") == set()


def test_a_piped_prune_prints_no_progress_bar(pg: PgTarget, db: Db, jobs: Jobs) -> None:
    result = subprocess.run(
        [TASKQ_BIN, "prune", "--yes"],
        env={**pg.env(), "TASKQ_PRUNE_BATCH_SIZE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "archiving" not in result.stdout + result.stderr
    assert "\x1b[" not in result.stdout
    assert "moved 3 jobs to the archive in 4 batches" in result.stdout


# --- the embedded database, as on a fresh clone ---------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_prune_works_against_the_embedded_database(embedded_dir: Path) -> None:
    from taskq_core import embedded

    dsn = f"embedded:{embedded_dir}"

    def taskq(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
        env.update(TASKQ_PG_DSN=dsn, NO_COLOR="1")
        done = subprocess.run(
            [TASKQ_BIN, *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (args, done.stderr)
        return done

    taskq("migrate", "up")
    job_ids = taskq("enqueue", "work", "--count", "2").stdout.split()
    for job_id in job_ids:
        taskq("cancel", job_id)

    async def age() -> None:
        conn = await asyncpg.connect(embedded.ensure_server(embedded_dir))
        try:
            await conn.execute("UPDATE taskq.jobs SET finished_at = now() - interval '40 days'")
        finally:
            await conn.close()

    asyncio.run(age())
    dry = json.loads(taskq("prune", "--dry-run", "--json").stdout)
    assert dry["counts"] == [{"status": "cancelled", "queue": "default", "count": 2}]
    moved = taskq("prune", "--yes")
    assert "moved 2 jobs to the archive in 1 batch;" in moved.stdout
    shown = json.loads(taskq("jobs", "show", job_ids[0], "--json").stdout)
    assert shown["archived"] is not None and shown["events"] == []


def test_an_archived_job_is_answered_as_archived_by_every_command(
    cli: Callable[..., CliResult], jobs: Jobs
) -> None:
    assert cli("prune", "--yes").exit_code == 0
    ident = str(jobs.failed_old.id)
    for args in (
        ["cancel", ident],
        ["retry", ident],
        ["jobs", "requeue", ident],
        ["jobs", "fail", ident],
        ["jobs", "move", ident, "--to", "elsewhere"],
    ):
        result = cli(*args)
        assert result.exit_code == 1, (args, result)
        line = one_error_line(result)
        assert f"job {ident} is archived: it ended failed" in line, line
        assert "no job with id" not in line
    assert cli("jobs", "show", ident).exit_code == 0  # where it is still found
    unknown = cli("cancel", "00000000-0000-0000-0000-000000000001")
    assert unknown.exit_code == 1 and "no job with id" in unknown.stderr
