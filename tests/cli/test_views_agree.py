"""One fixture database read through every view: ``taskq queues|jobs|workers list`` (JSON and
tables), ``jobs show`` and ``jobs explain``, the dashboard snapshot and ``taskq top`` (the
Textual app), and the web UI (its JSON API and pages). Every view must give the same
claimed, running and pending counts, and the same attempt for the claimed job (issue 38).

The fixture is the issue's: a worker with two consumers runs two long bodies and holds a
third job claimed behind them (prefetched, its body not started, for five minutes), one job
pending, one scheduled job overdue with no maintenance leader to promote it (in a queue of
its own), one succeeded and one failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from textual.widgets import Input

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.tui.app import TopApp
from taskq_core.backend.protocol import Start
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, parse_json
from tests.conftest import CliResult, PgTarget
from tests.ui.inprocess import open_ui

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]

# What every view must say of the fixture's queue "default".
COUNTS = {"pending": 1, "running": 2, "claimed": 1}
CLAIMED_ATTEMPT = "0/3"  # its claim has not started its body: nothing spent yet
PREFETCH_WHY = "claimed behind busy consumers on web-1 (2/2 +1 claimed)"
NO_LEADER_WHY = "scheduled jobs overdue: no leader to promote them"


@dataclass(frozen=True)
class Fixture:
    worker: UUID
    claimed: UUID
    running: tuple[UUID, UUID]


def _fixture(db: Db) -> Fixture:
    worker = db.register_worker(["default", "reports"], ["work"], concurrency=2, label="web-1")
    db.succeeded_job()
    db.failed_job()
    long_jobs = [db.enqueue(queue="default", priority=50) for _ in range(2)]
    cron = db.enqueue(queue="default", priority=40)
    claimed = db.claim(worker, "default", limit=3)
    assert [row.id for row in claimed] == [*(job.id for job in long_jobs), cron.id]
    starts = [Start(row.id, row.attempt) for row in claimed[:2]]
    assert db.call(lambda b: b.mark_started_many(worker, starts)) == {j.id for j in long_jobs}
    db.enqueue(queue="default")
    overdue = db.enqueue(queue="reports", delay=timedelta(minutes=1))
    # Time travel for the setup only: the claim and the due time lie minutes back.
    db.sql(
        "UPDATE {schema}.jobs SET claimed_at = claimed_at - interval '5 minutes' WHERE id = $1",
        cron.id,
    )
    db.sql(
        "UPDATE {schema}.jobs SET scheduled_at = clock_timestamp() - interval '10 minutes' "
        "WHERE id = $1",
        overdue.id,
    )
    return Fixture(worker, cron.id, (long_jobs[0].id, long_jobs[1].id))


def _counts(pending: int, running: int, claimed: int) -> dict[str, int]:
    return {"pending": pending, "running": running, "claimed": claimed}


def test_every_view_counts_claimed_running_and_pending_alike(
    cli: Cli, db: Db, pg: PgTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = _fixture(db)
    claimed_id = str(fixture.claimed)

    # taskq queues list: counts.running is the status (claimed included), claimed apart.
    queues = {q["name"]: q for q in parse_json(cli("queues", "list", "--json"))["queues"]}
    default = queues["default"]
    running_status = default["counts"]["running"]
    claimed = default["claimed"]
    assert _counts(default["counts"]["pending"], running_status - claimed, claimed) == COUNTS
    assert queues["reports"]["counts"]["scheduled"] == 1
    table = {line.split()[0]: line for line in cli("queues", "list").stdout.splitlines()}
    assert " 2 +1 claimed " in table["default"], table

    # taskq jobs list: the claimed job is listed as claimed, its attempt not spent.
    jobs = parse_json(cli("jobs", "list", "--queue", "default", "--json"))["jobs"]
    assert (
        _counts(
            sum(j["status"] == "pending" for j in jobs),
            sum(j["status"] == "running" and not j["claimed"] for j in jobs),
            sum(j["claimed"] for j in jobs),
        )
        == COUNTS
    )
    (claimed_doc,) = [j for j in jobs if j["claimed"]]
    assert claimed_doc["id"] == claimed_id
    assert f"{claimed_doc['attempts_spent']}/{claimed_doc['attempt_budget']}" == CLAIMED_ATTEMPT
    rows = {line.split()[0]: line.split() for line in cli("jobs", "list").stdout.splitlines()}
    assert rows[claimed_id][3:5] == ["claimed", CLAIMED_ATTEMPT]
    assert [rows[str(i)][3:5] for i in fixture.running] == [["running", "1/3"]] * 2
    shown = cli("jobs", "show", claimed_id).stdout
    assert "#1 claimed, its body not started; 0 of 3 used" in shown
    explained = parse_json(cli("jobs", "explain", claimed_id, "--json"))
    assert explained["verdict"]["facts"]["claimed"] is True
    assert explained["verdict"]["facts"]["attempts_spent"] == 0
    headline = cli("jobs", "explain", claimed_id).stdout.splitlines()[0]
    assert headline.endswith(f"is claimed by worker {fixture.worker}, waiting for a free consumer")

    # taskq workers list: two bodies running, one job claimed ahead of a free consumer.
    (worker,) = parse_json(cli("workers", "list", "--json"))["workers"]
    assert (worker["running_jobs"], worker["claimed_jobs"]) == (2, 1)
    assert "2/2 +1 claimed" in cli("workers", "list").stdout

    # The dashboards: taskq top's snapshot and app, and the web UI, on one event loop.
    monkeypatch.setattr(Input, "cursor_blink", False)
    asyncio.run(_check_dashboards(pg, claimed_id))


async def _check_dashboards(pg: PgTarget, claimed_id: str) -> None:
    async with open_ui(pg) as ui:
        snapshot = await ui.source.snapshot(JobsFilter.parse("status=all"))
        queue = {q.name: q for q in snapshot.queues}["default"]
        assert _counts(queue.pending, queue.running, queue.claimed) == COUNTS
        assert (snapshot.totals()[JobStatus.RUNNING], snapshot.claimed()) == (2, 1)
        await _check_top(ui.source, claimed_id)
        await _check_web(ui.client, claimed_id)


async def _check_top(source: Any, claimed_id: str) -> None:
    app = TopApp(source, refresh=3600.0, timeout=5.0)
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot)
        await pilot.press("slash")
        pilot.app.query_one("#jobs-filter", Input).value = "status=all"
        await pilot.press("enter")
        await _settle(pilot)
        queues = _rows(app.queues_table)
        assert queues["default"]["running"] == "2 +1 claimed"
        assert queues["default"]["pending"] == "1"
        assert queues["default"]["why"] == PREFETCH_WHY
        assert queues["reports"]["why"] == NO_LEADER_WHY
        jobs = _keyed_rows(app.jobs_pane.table)
        assert (jobs[claimed_id]["status"], jobs[claimed_id]["attempt"]) == (
            "claimed",
            CLAIMED_ATTEMPT,
        )
        (worker,) = _rows(app.workers_table).values()
        assert "2/2 +1 claimed" in worker.values()


async def _settle(pilot: Any) -> None:
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


def _labels(table: Any) -> list[str]:
    return [str(column.label) for column in table.ordered_columns]


def _rows(table: Any) -> dict[str, dict[str, str]]:
    """Rows keyed by their first cell, each a dict by column label."""
    labels = _labels(table)
    found = {}
    for index in range(table.row_count):
        cells = [str(cell) for cell in table.get_row_at(index)]
        found[cells[0]] = dict(zip(labels, cells, strict=True))
    return found


def _keyed_rows(table: Any) -> dict[str, dict[str, str]]:
    """Rows keyed by their row key, each a dict by column label."""
    labels = _labels(table)
    return {
        str(row.key.value): dict(zip(labels, (str(c) for c in table.get_row(row.key)), strict=True))
        for row in table.ordered_rows
    }


async def _check_web(client: Any, claimed_id: str) -> None:
    queues = (await client.get("/api/queues")).json()["queues"]
    by_name = {q["name"]: q for q in queues}
    default = by_name["default"]
    assert _counts(default["pending"], default["running"], default["claimed"]) == COUNTS
    assert (default["why"], by_name["reports"]["why"]) == (PREFETCH_WHY, NO_LEADER_WHY)
    overview = (await client.get("/api/overview")).json()
    assert (overview["totals"]["running"], overview["claimed"]) == (2, 1)
    jobs = (await client.get("/api/jobs", params={"queue": "default"})).json()["jobs"]
    assert (
        _counts(
            sum(j["status"] == "pending" for j in jobs),
            sum(j["status"] == "running" and not j["claimed"] for j in jobs),
            sum(j["claimed"] for j in jobs),
        )
        == COUNTS
    )
    job = (await client.get(f"/api/jobs/{claimed_id}")).json()
    job = job.get("job", job)
    assert f"{job['attempts_spent']}/{job['attempt_budget']}" == CLAIMED_ATTEMPT
    (worker,) = (await client.get("/api/workers")).json()["workers"]
    assert (worker["running_jobs"], worker["claimed_jobs"], worker["load"]) == (
        2,
        1,
        "2/2 +1 claimed",
    )
    queues_page = (await client.get("/queues")).text
    assert "+1 claimed" in queues_page and PREFETCH_WHY in queues_page
    jobs_page = (await client.get("/jobs", params={"status": "running"})).text
    assert f"{CLAIMED_ATTEMPT}</td>" in jobs_page and ">claimed</span>" in jobs_page
    detail = (await client.get(f"/jobs/{claimed_id}")).text
    assert "0 of 3 used" in detail and ">claimed</span>" in detail
    assert "2/2 +1 claimed" in (await client.get("/workers")).text
