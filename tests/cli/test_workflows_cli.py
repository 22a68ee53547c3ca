"""`taskq workflows list|show|cancel|retry`: what they print (table and --json) for workflows
enqueued through the client and driven as workers drive them, what cancel and retry change
in the database, ids taken whole or as a unique piece, and unknown or malformed ids refused
in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from taskq_core.backend.protocol.workflows import WorkflowStatus
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import CliResult
from tests.workflow_seed import (
    SeededWorkflow,
    diamond_under_way,
    make_diamond,
    run_all,
    run_step,
)

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]
S = JobStatus


def words(text: str) -> list[str]:
    """Each line with its runs of spaces (column gaps, field alignment) made one."""
    return [" ".join(line.split()) for line in text.splitlines()]


def diamond(db: Db, **fields: Any) -> SeededWorkflow:
    return db.call(lambda b: make_diamond(b, **fields))


def step(db: Db, run: SeededWorkflow, name: str, outcome: Any = "succeeded", **fields: Any) -> Any:
    return db.call(lambda b: run_step(b, run, name, outcome, **fields))


def started(db: Db) -> SeededWorkflow:
    """extract succeeded, t1 running, t2 due, load and report waiting."""
    return db.call(diamond_under_way)


def workflow_status(db: Db, run: SeededWorkflow) -> WorkflowStatus:
    row = db.call(lambda b: b.get_workflow(run.id))
    assert row is not None
    return row.status


def test_list_json_has_each_workflow_with_its_steps_by_status(cli: Cli, db: Db) -> None:
    run = started(db)
    document = parse_json(cli("workflows", "list", "--json"))
    assert document["count"] == 1
    (listed,) = document["workflows"]
    assert (listed["id"], listed["name"], listed["status"]) == (
        str(run.id),
        "nightly-etl",
        "running",
    )
    assert listed["counts"] == {
        "total": 5,
        "ended": 1,
        "by_status": {"pending": 1, "running": 1, "succeeded": 1, "waiting": 2},
    }
    assert "T" in listed["created_at"] and listed["finished_at"] is None
    assert listed["cancel_requested_at"] is None and listed["metadata"] == {}


def test_list_filters_by_status_and_limit(cli: Cli, db: Db) -> None:
    done = diamond(db, name="done", queue="q1")
    db.call(lambda b: run_all(b, done))
    running = diamond(db, name="running", queue="q2")

    def ids(*flags: str) -> list[str]:
        listed = parse_json(cli("workflows", "list", "--json", *flags))["workflows"]
        return [w["id"] for w in listed]

    assert ids() == [str(running.id), str(done.id)]  # newest first
    assert ids("--status", "succeeded") == [str(done.id)]
    assert ids("--status", "running") == [str(running.id)]
    assert ids("--status", "failed") == []
    assert ids("--limit", "1") == [str(running.id)]
    table = cli("workflows", "list", "--limit", "1")
    assert "showing the newest 1; a larger --limit shows more" in table.stderr
    line = one_error_line(cli("workflows", "list", "--status", "paused"))
    assert "unknown workflow status 'paused' (use running, succeeded, failed, cancelled)" in line
    assert "out of range" in one_error_line(cli("workflows", "list", "--limit", "0"))


def test_list_table_shows_the_steps_ended_and_by_status(cli: Cli, db: Db) -> None:
    run = started(db)
    result = cli("workflows", "list")
    assert result.exit_code == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "id", "name", "status", "ended", "waiting", "due", "running", "failed", "cancelled",
        "created", "finished",
    ]  # fmt: skip
    cells = row.split()
    assert cells[:9] == [str(run.id), "nightly-etl", "running", "1/5", "2", "1", "1", "0", "0"]
    assert cells[10:] == ["ago", "-"]


def test_an_empty_list_says_so_on_stderr(cli: Cli, db: Db) -> None:
    result = cli("workflows", "list")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no workflows match" in result.stderr
    assert parse_json(cli("workflows", "list", "--json")) == {"workflows": [], "count": 0}


def test_show_has_the_workflow_and_every_step_with_what_it_waits_for(cli: Cli, db: Db) -> None:
    run = started(db)
    result = cli("workflows", "show", str(run.id))
    assert result.exit_code == 0, result.stderr
    lines = words(result.stdout)
    assert f"id {run.id}" in lines
    assert "name nightly-etl" in lines
    assert "status running" in lines
    assert "progress 1 of 5 steps ended" in lines
    assert "by status 2 waiting, 1 pending, 1 running, 1 succeeded" in lines
    header = lines.index("steps") + 1
    assert lines[header].startswith("step actor status after waits for requires attempt")
    rows = {line.split()[0]: line for line in lines[header + 1 :]}
    assert list(rows) == ["extract", "t1", "t2", "load", "report"]
    assert rows["extract"] == f"extract extract succeeded - - succeeded 1 - {run.jobs['extract']}"
    assert rows["t1"] == f"t1 transform running extract - succeeded 1 - {run.jobs['t1']}"
    assert rows["load"] == f"load load waiting t1, t2 t1, t2 succeeded 0 - {run.jobs['load']}"
    assert rows["report"] == f"report report waiting load load finished 0 - {run.jobs['report']}"


def test_show_json_lists_the_steps_in_order_with_their_outcomes(cli: Cli, db: Db) -> None:
    run = diamond(db)
    step(db, run, "extract")
    step(db, run, "t1", "failed")  # load is cancelled; report (finished) is released
    document = parse_json(cli("workflows", "show", str(run.id), "--json"))
    assert (document["id"], document["status"]) == (str(run.id), "running")
    assert document["counts"]["by_status"] == {
        "cancelled": 1, "failed": 1, "pending": 2, "succeeded": 1,
    }  # fmt: skip
    steps = {s["name"]: s for s in document["steps"]}
    assert list(steps) == ["extract", "t1", "t2", "load", "report"]
    assert steps["t1"] == {
        **steps["t1"],
        "job_id": str(run.jobs["t1"]),
        "actor": "transform",
        "queue": "etl",
        "status": "failed",
        "requires": "succeeded",
        "after": ["extract"],
        "waiting_for": [],
        "attempt": 1,
        "error_class": "ValueError",
        "error_message": "the March export has no header row",
        "cancel_reason": None,
    }
    assert (steps["load"]["status"], steps["load"]["cancel_reason"]) == (
        "cancelled",
        "dependency t1 failed",
    )
    assert (steps["report"]["status"], steps["report"]["requires"]) == ("pending", "finished")
    assert "T" in steps["t1"]["finished_at"] and steps["t2"]["started_at"] is None


def test_show_takes_a_unique_piece_and_refuses_bad_unknown_or_ambiguous_ids(
    cli: Cli, db: Db
) -> None:
    first = diamond(db, queue="q1")
    second = diamond(db, queue="q2")
    tail = first.id.hex[-8:]
    assert parse_json(cli("workflows", "show", tail, "--json"))["id"] == str(first.id)
    shared = first.id.hex[:4]  # the head of a time-ordered id: both have it
    assert second.id.hex.startswith(shared)
    for verb in ("show", "cancel", "retry"):
        line = one_error_line(cli("workflows", verb, "not-an-id!"))
        assert "'not-an-id!' is not a workflow id" in line
        unknown = UUID(int=first.id.int ^ 1)
        assert f"no workflow with id {unknown}" in one_error_line(
            cli("workflows", verb, str(unknown))
        )
        assert "no workflow id starts or ends with 'abcdef99'" in one_error_line(
            cli("workflows", verb, "abcdef99")
        )
        assert "is ambiguous: 2 workflows match" in one_error_line(cli("workflows", verb, shared))
    # Nothing was changed by the refused commands.
    assert workflow_status(db, first) is WorkflowStatus.RUNNING
    assert db.get(first.jobs["load"]).status is S.WAITING


def test_cancel_cancels_what_has_not_ended_and_asks_running_steps_to_stop(cli: Cli, db: Db) -> None:
    run = started(db)
    document = parse_json(
        cli("workflows", "cancel", str(run.id)[-12:], "--reason", "bad input", "--json")
    )
    assert document["workflow_id"] == str(run.id)
    assert (document["cancelled"], document["stopping"]) == (3, 1)  # t2, load, report; t1
    assert document["status"] == "running"  # until t1 has stopped
    reason = document["cancel_reason"]
    assert reason.startswith("workflow cancelled by ") and reason.endswith(": bad input")
    for name in ("t2", "load", "report"):
        job = db.get(run.jobs[name])
        assert (job.status, job.cancel_reason) == (S.CANCELLED, reason)
    t1 = db.get(run.jobs["t1"])
    assert t1.status is S.RUNNING and t1.cancel_requested_at is not None
    assert db.get(run.jobs["extract"]).status is S.SUCCEEDED
    [logged] = db.call(lambda b: b.list_operator_log(action="workflow_cancel"))
    assert (logged.target, logged.reason) == (str(run.id), "bad input")
    assert logged.by is not None and reason.startswith(f"workflow cancelled by {logged.by}")
    assert logged.detail == {"cancelled": 3, "stopping": 1}
    again = cli("workflows", "cancel", str(run.id))
    assert again.exit_code == 0, again.stderr
    assert "a cancel was asked before; it ends cancelled once its running steps" in again.stdout


def test_cancel_of_waiting_steps_ends_the_workflow_and_a_finished_one_is_refused(
    cli: Cli, db: Db
) -> None:
    waiting = diamond(db, queue="q1")
    result = cli("workflows", "cancel", str(waiting.id))
    assert result.exit_code == 0, result.stderr
    assert words(result.stdout) == [
        f"workflow {waiting.id}: cancelled 5 step(s) at once; asked 0 running step(s) to "
        "stop; it is cancelled"
    ]
    assert workflow_status(db, waiting) is WorkflowStatus.CANCELLED
    already = cli("workflows", "cancel", str(waiting.id))
    assert (already.exit_code, already.stdout.strip()) == (
        0,
        f"workflow {waiting.id} was already cancelled",
    )
    assert parse_json(cli("workflows", "cancel", str(waiting.id), "--json"))["changed"] == {}
    done = diamond(db, queue="q2")
    db.call(lambda b: run_all(b, done))
    line = one_error_line(cli("workflows", "cancel", str(done.id)))
    assert f"workflow {done.id} is succeeded: there is nothing to cancel" in line
    assert db.get(done.jobs["report"]).status is S.SUCCEEDED


def test_retry_runs_the_failed_and_cancelled_steps_again(cli: Cli, db: Db) -> None:
    run = diamond(db)
    step(db, run, "extract")
    step(db, run, "t1", "failed")
    step(db, run, "t2")
    step(db, run, "report")  # requires finished: it ran although load was cancelled
    assert workflow_status(db, run) is WorkflowStatus.FAILED
    document = parse_json(cli("workflows", "retry", str(run.id), "--json"))
    assert document == {
        "workflow_id": str(run.id),
        "retried": 2,  # t1 (failed) and load (cancelled)
        "changed": {"status": {"from": "failed", "to": "running"}},
        "status": "running",
    }
    assert db.get(run.jobs["t1"]).status is S.PENDING  # its dependency succeeded
    load = db.get(run.jobs["load"])
    assert (load.status, load.cancel_reason) == (S.WAITING, None)  # waits for t1 again
    step(db, run, "t1")
    step(db, run, "load")
    assert workflow_status(db, run) is WorkflowStatus.SUCCEEDED
    [logged] = db.call(lambda b: b.list_operator_log(action="workflow_retry"))
    assert (logged.target, logged.detail) == (str(run.id), {"retried": 2})
    line = one_error_line(cli("workflows", "retry", str(run.id)))
    assert "is succeeded and has no failed, crashed or cancelled step: there is nothing to" in line


def test_retry_prints_what_it_did(cli: Cli, db: Db) -> None:
    run = diamond(db)
    step(db, run, "extract", "failed")  # t1, t2, load cancelled; report (finished) released
    result = cli("workflows", "retry", str(run.id))
    assert result.exit_code == 0, result.stderr
    assert words(result.stdout) == [f"workflow {run.id}: retried 4 step(s); it is running"]
    assert db.get(run.jobs["extract"]).status is S.PENDING
    assert [db.get(run.jobs[name]).status for name in ("t1", "t2", "load")] == [S.WAITING] * 3
