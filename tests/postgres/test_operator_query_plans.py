"""Operator filter queries and the leader's cleanup sweeps stay index-backed on a big table
(no sequential scan of jobs)."""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.queries import render
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import generic_plan, scan_names, scans

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

ROWS = 200_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


FILTERS: list[tuple[Any, ...]] = [
    (None, None, None, None, 100),  # jobs list
    (["failed"], None, None, None, 100),  # jobs list --status failed
    (None, "q3", None, None, 100),  # jobs list --queue q3
    (None, None, "actor_7", None, 50),  # jobs list --actor actor_7
    (["succeeded", "failed"], "q1", "actor_2", None, 100),
]


async def test_list_jobs_uses_indexes_on_a_big_table(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"""INSERT INTO {pg.schema}.jobs (id, actor, queue, status, created_at)
                SELECT gen_random_uuid(), 'actor_' || (n % 20), 'q' || (n % 8),
                       (ARRAY['pending','succeeded','failed','running'])[1 + n % 4]
                           ::{pg.schema}.job_status,
                       now() - make_interval(secs => n)
                FROM generate_series(1, {ROWS}) AS n"""
        )
        await conn.execute(f"ANALYZE {pg.schema}.jobs")
        for args in FILTERS:
            async with conn.transaction():
                # How list_jobs runs: custom plans for the actual filter values.
                await conn.execute(render("use_custom_plans", pg.schema))
                raw = await conn.fetchval(
                    f"EXPLAIN (FORMAT JSON) {render('list_jobs', pg.schema)}", *args
                )
            plan = json.loads(raw)[0]["Plan"]
            scans = [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan"]
            assert scans == [], f"sequential scan for {args}"
    finally:
        await conn.close()


# --- the leader's cleanup sweeps ---------------------------------------------------------------
QUEUES = 8


def _picks_due_rows(plan: dict[str, Any], index: str, column: str, *, due: int) -> None:
    """A sweep's analyzed plan: its pick reads the ``due`` rows along ``index`` bounded on
    ``column`` (an index condition, not a filter on every row), its update finds them by
    primary key, and nothing scans the whole of jobs."""
    names = scan_names(plan)
    assert "Seq Scan jobs" not in names, names
    assert any(scan.endswith("jobs_pkey") for scan in names), names
    [pick] = [n for n in scans(plan) if n.get("Index Name") == index]
    assert column in pick.get("Index Cond", ""), pick
    assert pick["Actual Rows"] == due, pick


async def test_the_cleanup_sweeps_walk_their_indexes_on_a_big_table(pg: PgTarget) -> None:
    schema = pg.schema
    conn = await asyncpg.connect(pg.dsn)
    try:
        # 200k jobs: a quarter pending (a deep backlog in each of 8 queues, some keyed), a
        # quarter running on 1000 workers, half finished with results expiring over 10 days.
        await conn.execute(
            f"""INSERT INTO {schema}.workers (id, hostname, pid, last_seen_at)
                SELECT ('00000000-0000-0000-0000-' || lpad(n::text, 12, '0'))::uuid, 'box', n,
                       now() - make_interval(secs => n * 60)
                FROM generate_series(1, 1000) AS n"""
        )
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, fairness_key,
                    locked_by_worker, finished_at, result, result_expires_at)
                SELECT gen_random_uuid(), 'work', 'q' || (n / 4 % {QUEUES}),
                       (ARRAY['pending', 'succeeded', 'failed', 'running'])[1 + n % 4]
                           ::{schema}.job_status,
                       CASE WHEN n % 3 = 0 THEN 'tenant-' || (n % 5) END,
                       CASE WHEN n % 4 = 3 THEN ('00000000-0000-0000-0000-'
                           || lpad((1 + n % 1000)::text, 12, '0'))::uuid END,
                       CASE WHEN n % 4 IN (1, 2) THEN now() - make_interval(secs => n * 4) END,
                       CASE WHEN n % 4 IN (1, 2) THEN '{{"ok": true}}'::jsonb END,
                       CASE WHEN n % 4 IN (1, 2)
                           THEN now() - interval '5 days' + make_interval(secs => n * 4) END
                FROM generate_series(1, {ROWS}) AS n"""
        )
        # And 20k scheduled over the next days, 100 of them due now; a tenth of them with a
        # deadline, 10 of those passed.
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, scheduled_at,
                    schedule_to_close)
                SELECT gen_random_uuid(), 'work', 'q0', 'scheduled',
                       now() + make_interval(secs => n * 10 - 1000),
                       CASE WHEN n % 10 = 0
                           THEN now() + make_interval(secs => n * 10 - 1000) END
                FROM generate_series(1, 20000) AS n"""
        )
        await conn.execute(f"ANALYZE {schema}.jobs")
        await conn.execute(f"ANALYZE {schema}.workers")

        # list_waiting_queues: a skip scan, one index probe per queue (plus the one that finds
        # none after the last), whatever the backlog.
        waiting = await generic_plan(conn, render("list_waiting_queues", schema), analyze=True)
        found = scans(waiting)
        assert {node["Index Name"] for node in found} == {"jobs_fair_dispatch_idx"}, found
        fetched = sum(node["Actual Rows"] * node["Actual Loops"] for node in found)
        assert fetched <= QUEUES + 1, fetched
        records = await conn.fetch(render("list_waiting_queues", schema))
        assert sorted(r["queue"] for r in records) == [f"q{n}" for n in range(QUEUES)]

        # promote_scheduled_jobs: the due rows along jobs_scheduled_idx up to one clock
        # reading, the update by primary key (a scan of every scheduled row, then a hash join
        # against a scan of the whole table, before).
        promoted = await generic_plan(
            conn, render("promote_scheduled_jobs", schema), "text", "'wake'", analyze=True
        )
        assert "Index Scan jobs_scheduled_idx" in scan_names(promoted), scan_names(promoted)
        _picks_due_rows(promoted, "jobs_scheduled_idx", "scheduled_at", due=100)

        # fail_overdue_jobs: the same way along jobs_deadline_idx.
        overdue = await generic_plan(conn, render("fail_overdue_jobs", schema), analyze=True)
        _picks_due_rows(overdue, "jobs_deadline_idx", "schedule_to_close", due=10)

        # expire_results: the pick walks jobs_result_expiry_idx, the update finds its rows by
        # primary key.
        expire = scan_names(
            await generic_plan(conn, render("expire_results", schema), "bigint", "1000")
        )
        assert "Index Scan jobs_result_expiry_idx" in expire, expire
        assert "Seq Scan jobs" not in expire, expire

        # delete_stale_workers: workers oldest first on workers_last_seen_idx, the workers of
        # the running jobs read once along the running rows' index.
        stale = scan_names(
            await generic_plan(
                conn, render("delete_stale_workers", schema), "interval, bigint", "'1 hour', 100"
            )
        )
        assert any("jobs_running_actor_idx" in scan for scan in stale), stale
        assert any("workers_last_seen_idx" in scan for scan in stale), stale
        assert "Seq Scan jobs" not in stale, stale

        # expired_leases (the reclaim): the running rows along their index, twice (the
        # expired ones, then the bodies of their workers); never the whole table.
        expired = scan_names(
            await generic_plan(
                conn,
                render("expired_leases", schema),
                "interval, interval, interval",
                "'1 s', '1 s', '1 s'",
            )
        )
        assert any("jobs_running_actor_idx" in scan for scan in expired), expired
        assert "Seq Scan jobs" not in expired, expired

        # poll_cancel_flags: only the running jobs with a cancel requested.
        polled = scan_names(
            await generic_plan(conn, render("poll_cancel_flags", schema), "uuid", f"'{uuid4()}'")
        )
        assert any("jobs_cancel_requested_idx" in scan for scan in polled), polled
    finally:
        await conn.close()


async def test_the_batch_prune_reads_only_the_batches_past_their_retention(pg: PgTarget) -> None:
    schema = pg.schema
    conn = await asyncpg.connect(pg.dsn)
    try:
        # 20k ended batches, one every 30 s: the oldest 100 ended over 7 days ago.
        await conn.execute(
            f"""INSERT INTO {schema}.batches (id, queue, status, created_at, completed_at)
                SELECT gen_random_uuid(), 'q0', 'complete', at, at
                FROM (SELECT now() - interval '7 days 50 minutes 15 seconds'
                             + make_interval(secs => n * 30) AS at
                      FROM generate_series(1, 20100) AS n) ended"""
        )
        await conn.execute(f"ANALYZE {schema}.batches")
        pruned = await generic_plan(
            conn, render("prune_old_batches", schema), "interval, integer", "'7 days', 1000",
            analyze=True,
        )  # fmt: skip
        # Along batches_ended_idx up to one clock reading: the 100 due, not every ended batch
        # filtered one by one (the volatile clock_timestamp() is never an index condition).
        [pick] = [n for n in scans(pruned) if n.get("Index Name") == "batches_ended_idx"]
        assert "completed_at" in pick.get("Index Cond", ""), pick
        assert pick["Actual Rows"] == 100 and not pick.get("Rows Removed by Filter"), pick
    finally:
        await conn.close()


# --- the drain monitor -----------------------------------------------------------------------
async def test_the_drain_monitor_reads_the_queue_head_with_statistics_of_an_all_pending_table(
    pg: PgTarget,
) -> None:
    # A drain's shape: statistics taken while the backlog was all pending, most of it done
    # since. The pending side once became a sequential scan that stepped over every done job,
    # on every call of `--until-idle`'s check (and of a benchmark's drain watch).
    schema = pg.schema
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status)
                SELECT gen_random_uuid(), 'work', 'default', 'pending'
                FROM generate_series(1, 50000)"""
        )
        await conn.execute(f"ANALYZE {schema}.jobs")
        await conn.execute(
            f"""UPDATE {schema}.jobs SET status = 'succeeded', finished_at = now()
                WHERE id IN (SELECT id FROM {schema}.jobs ORDER BY id LIMIT 49990)"""
        )
        plan = await generic_plan(
            conn, render("has_active_jobs", schema), "text[]", "ARRAY['default']", analyze=True
        )
    finally:
        await conn.close()
    names = scan_names(plan)
    assert "Seq Scan jobs" not in names, names
    read = sum(node.get("Actual Rows", 0) for node in scans(plan))
    assert read <= 10, (read, names)
