"""A workflow's steps in `taskq jobs show|explain|list`: a step names its workflow and step,
a waiting step says which dependencies it waits for (with their statuses) and on what terms,
a step whose release was lost says the leader's sweep decides it, and `jobs list --status
waiting` lists the waiting steps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cli.conftest import Db, parse_json
from tests.conftest import CliResult
from tests.workflow_seed import SeededWorkflow, diamond_under_way, run_step

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def fields(result: CliResult) -> dict[str, str]:
    """``name  value`` lines of a show command, by name (names of one word or two)."""
    assert result.exit_code == 0, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        name, _, value = line.partition("  ")
        if value.strip():
            found[name.strip()] = value.strip()
    return found


@pytest.fixture
def run(db: Db) -> SeededWorkflow:
    """extract succeeded, t1 running, t2 due, load and report waiting."""
    return db.call(diamond_under_way)


def test_jobs_show_of_a_waiting_step_names_its_workflow_and_what_it_waits_for(
    cli: Cli, run: SeededWorkflow
) -> None:
    shown = fields(cli("jobs", "show", str(run.jobs["load"])))
    assert shown["status"] == "waiting"
    assert shown["origin"] == f"step load of workflow {run.id}"
    assert shown["workflow"] == "nightly-etl: running, 1 of 5 steps ended"
    assert shown["waits for"] == (
        "t1 (running), t2 (pending); it runs once every one succeeded, and is cancelled if one "
        "fails for good"
    )
    report = fields(cli("jobs", "show", str(run.jobs["report"])))
    assert (
        report["waits for"] == "load (waiting); it runs once every one ended, whatever the outcome"
    )


def test_jobs_show_json_carries_the_workflow_and_the_dependencies_not_ended(
    cli: Cli, db: Db, run: SeededWorkflow
) -> None:
    document = parse_json(cli("jobs", "show", str(run.jobs["load"]), "--json"))
    assert document["workflow"] == {
        "id": str(run.id),
        "name": "nightly-etl",
        "status": "running",
        "step": "load",
        "requires": "succeeded",
        "after": [
            {"step": "t1", "job_id": str(run.jobs["t1"]), "status": "running"},
            {"step": "t2", "job_id": str(run.jobs["t2"]), "status": "pending"},
        ],
        "release": "wait",
        "waiting_for": [
            {"step": "t1", "job_id": str(run.jobs["t1"]), "status": "running"},
            {"step": "t2", "job_id": str(run.jobs["t2"]), "status": "pending"},
        ],
    }
    assert document["job"]["metadata"]["workflow_step"] == "load"
    running = parse_json(cli("jobs", "show", str(run.jobs["t1"]), "--json"))["workflow"]
    assert (running["step"], running["release"], running["waiting_for"]) == ("t1", None, None)
    assert [d["step"] for d in running["after"]] == ["extract"]  # not waiting
    plain = db.enqueue()
    assert parse_json(cli("jobs", "show", str(plain.id), "--json"))["workflow"] is None
    assert "workflow" not in fields(cli("jobs", "show", str(plain.id)))


def test_jobs_explain_of_a_waiting_step_lists_its_dependencies(
    cli: Cli, run: SeededWorkflow
) -> None:
    result = cli("jobs", "explain", str(run.jobs["load"]))
    assert result.exit_code == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert lines[:3] == [
        f"job {run.jobs['load']} (actor 'load', queue 'etl') is waiting",
        f"step load of workflow {run.id}",
        "blocked: it is a workflow step that waits for t1 (running), t2 (pending); it runs "
        "once every one succeeded, and is cancelled if one fails for good",
    ]
    table = lines[lines.index("dependencies") + 1 :]
    assert table == [
        "step status job",
        f"t1 running {run.jobs['t1']}",
        f"t2 pending {run.jobs['t2']}",
    ]


def test_jobs_explain_json_names_the_finding_and_its_facts(cli: Cli, run: SeededWorkflow) -> None:
    document = parse_json(cli("jobs", "explain", str(run.jobs["load"]), "--json"))
    assert (document["status"], document["situation"]) == ("waiting", "waiting")
    assert document["origin"] == f"step load of workflow {run.id}"
    verdict = document["verdict"]
    assert verdict["code"] == "workflow_dependencies"
    assert verdict["facts"] == {
        "workflow_id": str(run.id),
        "step": "load",
        "requires": "succeeded",
        "waiting_for": ["t1", "t2"],
        "dependencies": [
            {"step": "t1", "job_id": str(run.jobs["t1"]), "status": "running"},
            {"step": "t2", "job_id": str(run.jobs["t2"]), "status": "pending"},
        ],
    }
    assert [c["code"] for c in document["checks"]] == ["workflow_dependencies"]
    # A step that dispatch serves gets the dispatch checks, and names its workflow too.
    due = parse_json(cli("jobs", "explain", str(run.jobs["t2"]), "--json"))
    assert due["origin"] == f"step t2 of workflow {run.id}"
    assert "workflow_dependencies" not in [c["code"] for c in due["checks"]]


def test_a_step_whose_release_was_lost_says_the_sweep_decides_it(
    cli: Cli, db: Db, run: SeededWorkflow
) -> None:
    lease = db.get(run.jobs["t1"]).lease()
    assert db.call(lambda b: b.mark_succeeded(lease, None))  # and no end hook ran
    db.call(lambda b: run_step(b, run, "t2", release=False))
    result = cli("jobs", "explain", str(run.jobs["load"]))
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert (
        "waits for nothing: every dependency ended (t1 succeeded, t2 succeeded); the release "
        "was lost and the leader's sweep decides the step at its next pass"
    ) in text
    shown = fields(cli("jobs", "show", str(run.jobs["load"])))
    assert shown["waits for"].startswith("nothing: every dependency ended")


def test_jobs_list_status_waiting_lists_the_waiting_steps(
    cli: Cli, db: Db, run: SeededWorkflow
) -> None:
    db.enqueue()  # a plain job: pending
    document = parse_json(cli("jobs", "list", "--status", "waiting", "--json"))
    assert {job["id"] for job in document["jobs"]} == {
        str(run.jobs["load"]),
        str(run.jobs["report"]),
    }
    assert {job["status"] for job in document["jobs"]} == {"waiting"}
    table = cli("jobs", "list", "--status", "waiting,pending")
    assert table.exit_code == 0, table.stderr
    statuses = [line.split()[3] for line in table.stdout.splitlines()[1:]]
    assert sorted(statuses) == ["pending", "pending", "waiting", "waiting"]
    help_text = cli("cancel", "--help").stdout
    assert "waiting" in help_text
