"""`taskq jobs reclaims`: the reclaim feed from a shell (list, --json, --after/--limit, --follow
until Ctrl-C), and `jobs explain` naming a job failed as poison."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import JobRow, Start
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]
NO_GRACE = timedelta(0)
# Events show at once: these tests make reclaims, then read them.
NO_DELAY = {"TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY": "0"}
PENDING = "reclaimed to pending"
CRASHED = "crashed (no retries left)"
POISONED = "failed: poison job (3 workers died running it)"


def crash(db: Db, job: JobRow) -> UUID:
    """A worker claims ``job``, starts it and dies; the leader reclaims it. The worker."""
    worker = uuid4()
    [claimed] = db.claim(worker, job.queue)
    assert claimed.id == job.id
    db.call(lambda b: b.mark_started_many(worker, [Start(job.id, claimed.attempt)]))
    db.sql(
        "UPDATE {schema}.jobs SET lock_expires_at = clock_timestamp() - interval '1 second' "
        "WHERE id = $1",
        job.id,
    )
    assert db.call(lambda b: b.reclaim_expired_leases(NO_GRACE, NO_GRACE)) == 1
    return worker


def three_kinds(db: Db) -> tuple[JobRow, JobRow, JobRow]:
    """A job back to pending, one crashed for good, one failed as poison (3 crashes)."""
    pending = db.enqueue("resize", queue="media", max_attempts=5)
    crash(db, pending)
    crashed = db.enqueue("mail", queue="notify", max_attempts=1)
    crash(db, crashed)
    poison = db.enqueue("explode", queue="risky", max_attempts=10)
    for _ in range(3):
        crash(db, poison)
    return pending, crashed, poison


def test_reclaims_lists_each_reclaim_with_its_job_and_what_happened(cli: Cli, db: Db) -> None:
    pending, crashed, poison = three_kinds(db)
    result = cli("jobs", "reclaims", env=NO_DELAY)
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if re.match(r"\s*\d+\s", line)]
    assert len(lines) == 5
    assert str(pending.id) in lines[0] and PENDING in lines[0] and "resize" in lines[0]
    assert str(crashed.id) in lines[1] and CRASHED in lines[1] and "notify" in lines[1]
    assert all(str(poison.id) in line for line in lines[2:])
    assert POISONED in lines[4] and PENDING in lines[2]


def test_reclaims_json_is_one_document_with_the_cursor(cli: Cli, db: Db) -> None:
    pending, crashed, poison = three_kinds(db)
    document = parse_json(cli("jobs", "reclaims", "--json", env=NO_DELAY))
    events = document["events"]
    assert document["count"] == 5 and document["next_after"] == events[-1]["id"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    first, last = events[0], events[-1]
    assert (first["job_id"], first["actor"], first["queue"]) == (str(pending.id), "resize", "media")
    assert (first["from_status"], first["to_status"], first["what"]) == (
        "running",
        "pending",
        PENDING,
    )
    assert first["poison"] is False and first["reason"] == "lock_expired"
    assert (last["job_id"], last["to_status"], last["what"]) == (str(poison.id), "failed", POISONED)
    assert last["poison"] is True and last["detail"]["crashes"] == 3
    assert events[1]["to_status"] == "crashed" and events[1]["job_id"] == str(crashed.id)


def test_reclaims_pages_with_after_and_limit(cli: Cli, db: Db) -> None:
    three_kinds(db)
    every = parse_json(cli("jobs", "reclaims", "--json", env=NO_DELAY))["events"]
    page = cli("jobs", "reclaims", "--limit", "2", env=NO_DELAY)
    assert page.exit_code == 0, page.stderr
    assert f"--after {every[1]['id']}" in page.stderr
    rest = parse_json(
        cli("jobs", "reclaims", "--after", str(every[1]["id"]), "--json", env=NO_DELAY)
    )
    assert [e["id"] for e in rest["events"]] == [e["id"] for e in every[2:]]


def test_reclaims_wait_for_the_visibility_delay(cli: Cli, db: Db) -> None:
    crash(db, db.enqueue(max_attempts=3))
    hidden = cli("jobs", "reclaims", "--json", env={"TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY": "1h"})
    assert parse_json(hidden)["count"] == 0


def test_no_reclaims_is_said_on_stderr(cli: Cli) -> None:
    result = cli("jobs", "reclaims")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no reclaims" in result.stderr
    assert parse_json(cli("jobs", "reclaims", "--json")) == {
        "events": [],
        "count": 0,
        "next_after": 0,
    }


@pytest.mark.parametrize(
    ("args", "flag"), [(["--limit", "0"], "--limit"), (["--after", "-1"], "--after")]
)
def test_bad_reclaims_options_are_one_error_line(cli: Cli, args: list[str], flag: str) -> None:
    assert flag in one_error_line(cli("jobs", "reclaims", *args))


def test_explain_names_a_poison_job_and_the_workers_it_took_down(cli: Cli, db: Db) -> None:
    poison = db.enqueue("explode", max_attempts=10)
    workers = [crash(db, poison) for _ in range(3)]
    assert db.get(poison.id).status is JobStatus.FAILED
    result = cli("jobs", "explain", str(poison.id))
    assert result.exit_code == 0, result.stderr
    assert "it is a poison job: 3 workers died while running it" in result.stdout
    for worker in workers:
        assert str(worker) in result.stdout
    document = parse_json(cli("jobs", "explain", str(poison.id), "--json"))
    assert document["verdict"]["code"] == "poison_job"
    assert document["verdict"]["facts"]["crashed_workers"] == [str(w) for w in workers]
    shown = cli("jobs", "show", str(poison.id))
    assert "PoisonJob: 3 workers died running it (TASKQ_POISON_RECLAIMS is 3)" in shown.stdout


# --- follow: a real process on a terminal ----------------------------------------------------
def spawn_follow(pg: PgTarget, *args: str, columns: int = 200) -> object:
    import pexpect

    return pexpect.spawn(
        TASKQ_BIN,
        ["jobs", "reclaims", "--follow", *args],
        env=pg.env(COLUMNS=str(columns), LINES="40", TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY="0.2"),
        encoding="utf-8",
        dimensions=(40, columns),
        timeout=30,
    )


def test_follow_shows_a_reclaim_made_after_it_started_and_ctrl_c_exits_0(
    db: Db, pg: PgTarget
) -> None:
    import pexpect

    before = db.enqueue("old", max_attempts=3)
    crash(db, before)
    child = spawn_follow(pg)
    assert isinstance(child, pexpect.spawn)
    child.expect(r"following reclaims after event (\d+) \(Ctrl-C stops\)")
    job = db.enqueue("resize", queue="media", max_attempts=3)
    worker = crash(db, job)
    child.expect(str(job.id))
    child.expect(r"\r\n")
    line = child.before
    assert "resize" in line and "media" in line and PENDING in line and str(worker) in line
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert "Traceback" not in (child.before or "")
    assert str(before.id) not in line


def test_follow_json_prints_one_object_per_line_and_limit_ends_it(db: Db, pg: PgTarget) -> None:
    import pexpect

    child = spawn_follow(pg, "--json", "--limit", "2")
    assert isinstance(child, pexpect.spawn)
    child.expect(r"following reclaims after event \d+")
    job = db.enqueue("explode", max_attempts=3)
    crash(db, job)
    crash(db, job)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    objects = [json.loads(line) for line in child.before.splitlines() if line.startswith("{")]
    assert [o["job_id"] for o in objects] == [str(job.id)] * 2
    assert objects[0]["id"] < objects[1]["id"]


@pytest.mark.slow
def test_reclaims_keep_every_id_whole_at_80_columns(db: Db, pg: PgTarget) -> None:
    import pexpect

    three_kinds(db)
    child = pexpect.spawn(
        TASKQ_BIN,
        ["jobs", "reclaims"],
        env=pg.env(
            TERM="xterm-256color",
            COLUMNS="80",
            LINES="40",
            TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY="0",
        ),
        encoding="utf-8",
        dimensions=(40, 80),
        timeout=60,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", child.read().replace("\r\n", "\n"))
    child.wait()
    assert "…" not in text
    ids = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text))
    jobs = {str(job.id) for job in db.jobs()}
    assert jobs <= ids, text
    assert max(len(line) for line in text.splitlines() if not line.startswith("not shown")) <= 80
