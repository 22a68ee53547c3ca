"""`taskq enqueue --unique-key K [--unique-for D]`: the key lands on the row, a duplicate is one
error line naming the key, the holder and when it is free again (exit 1, nothing inserted),
and `jobs show` prints the key."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from taskq_core.backend.protocol.unique import windowed_key
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def enqueued(result: CliResult) -> str:
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def test_a_unique_key_lands_on_the_row_and_a_second_job_is_refused(cli: Cli, db: Db) -> None:
    db.register_actor("report")
    first = db.get(enqueued(cli("enqueue", "report", "--unique-key", "report:7")))
    assert (first.unique_key, first.unique_until) == ("report:7", None)

    refused = cli("enqueue", "report", "--unique-key", "report:7", "--payload", '{"n": 2}')

    line = one_error_line(refused)
    assert line == (
        f"error: --unique-key 'report:7': held by job {first.id} (pending); "
        "free again once that job ends"
    )
    assert refused.stdout == ""
    assert [job.id for job in db.jobs()] == [first.id]


def test_once_the_holder_has_ended_the_key_is_free(cli: Cli, db: Db) -> None:
    db.register_actor("report")
    first = enqueued(cli("enqueue", "report", "--unique-key", "k"))
    assert cli("cancel", first).exit_code == 0
    second = enqueued(cli("enqueue", "report", "--unique-key", "k"))
    assert second != first
    assert db.get(second).status is JobStatus.PENDING


def test_a_windowed_key_is_refused_with_when_its_window_ends(cli: Cli, db: Db) -> None:
    db.register_actor("digest")
    job = db.get(enqueued(cli("enqueue", "digest", "--unique-key", "daily", "--unique-for", "30d")))
    assert job.unique_until is not None
    assert job.unique_key == windowed_key("daily", job.unique_until - timedelta(days=30))
    assert timedelta(0) < job.unique_until - job.created_at <= timedelta(days=30)

    refused = cli("enqueue", "digest", "--unique-key", "daily", "--unique-for", "P30D", "--json")

    line = one_error_line(refused)
    assert line.startswith(f"error: --unique-key 'daily': held by job {job.id} (pending); ")
    assert line.endswith(", when its window ends")
    assert "free again in " in line and "d" in line.split("free again in ")[1]
    assert refused.stdout == ""  # --json prints nothing on a refusal
    assert len(db.jobs()) == 1


def test_json_shows_the_created_job_and_jobs_show_prints_the_key(cli: Cli, db: Db) -> None:
    db.register_actor("digest")
    created = cli("enqueue", "digest", "--unique-key", "daily", "--unique-for", "2h", "--json")
    assert created.exit_code == 0, created.stderr
    [job_id] = [job["id"] for job in json.loads(created.stdout)["jobs"]]
    job = db.get(job_id)
    assert job.unique_until is not None

    shown = cli("jobs", "show", job_id)
    assert shown.exit_code == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("unique key")]
    assert job.unique_key is not None and job.unique_key in line
    assert f"its window ends {job.unique_until.isoformat(timespec='seconds')}" in line

    document = json.loads(cli("jobs", "show", job_id, "--json").stdout)["job"]
    assert document["unique_key"] == job.unique_key
    assert document["unique_until"] is not None

    plain = enqueued(cli("enqueue", "digest"))
    assert not any(
        line.startswith("unique key") for line in cli("jobs", "show", plain).stdout.splitlines()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unique-for", "1h"], "error: --unique-for needs a --unique-key"),
        (["--unique-key", ""], "error: --unique-key must not be empty"),
        (["--unique-key", "k", "--unique-for", "0s"], "error: --unique-for must be a positive"),
        (["--unique-key", "k", "--unique-for", "soon"], "error: --unique-for: invalid duration"),
        (["--unique-key", "k", "--count", "3"], "error: --count: 3 jobs cannot share one"),
    ],
)
def test_bad_unique_options_are_one_error_line_and_insert_nothing(
    cli: Cli, db: Db, args: list[str], message: str
) -> None:
    line = one_error_line(cli("enqueue", "report", *args))
    assert line.startswith(message), line
    assert db.jobs() == []


def test_retry_of_a_job_whose_key_another_job_holds_says_so(cli: Cli, db: Db) -> None:
    job = db.enqueue("report", unique_key="k", max_attempts=1, priority=1000)
    worker = db.register_worker(["default"], ["report"])
    [claimed] = db.claim(worker)
    db.fail(claimed)
    holder = enqueued(cli("enqueue", "report", "--unique-key", "k"))

    line = one_error_line(cli("retry", str(job.id)))

    assert line == (
        f"error: job {job.id} stays failed: another job holds its unique key now "
        "(retry it once that job has ended)"
    )
    assert db.get(job.id).status is JobStatus.FAILED
    assert cli("cancel", holder).exit_code == 0
    assert cli("retry", str(job.id)).exit_code == 0
    assert db.get(job.id).status is JobStatus.PENDING


@pytest.mark.parametrize("mode", ["return_existing", "replace"])
def test_on_conflict_answers_with_the_job_holding_the_key(cli: Cli, db: Db, mode: str) -> None:
    first = cli("enqueue", "work", "--unique-key", "k", "--payload", '{"n": 1}', "--delay", "1h")
    again = cli(
        "enqueue", "work", "--unique-key", "k", "--payload", '{"n": 2}', "--on-conflict", mode,
    )  # fmt: skip
    assert (first.exit_code, again.exit_code) == (0, 0), again.stderr
    assert again.stdout.strip() == first.stdout.strip()
    [job] = db.jobs()
    expected = {"n": 2} if mode == "replace" else {"n": 1}
    assert job.payload == expected
    assert job.status is (JobStatus.PENDING if mode == "replace" else JobStatus.SCHEDULED)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--on-conflict", "replace"], "--on-conflict 'replace' needs --unique-key"),
        (["--unique-key", "k", "--on-conflict", "merge"], "--on-conflict must be one of"),
    ],
)
def test_a_bad_on_conflict_is_one_line_and_inserts_nothing(
    cli: Cli, db: Db, args: list[str], expected: str
) -> None:
    assert expected in one_error_line(cli("enqueue", "work", *args))
    assert db.count("jobs") == 0
