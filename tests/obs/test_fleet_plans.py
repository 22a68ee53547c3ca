"""The fleet read stays index-backed on a big jobs table: no statement scans the table, the
loose index scans probe once per queue or (actor, queue) pair, and only the window's finished
rows and the running ones are fetched from the heap."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from taskq_core.backend.postgres.queries import render
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import generic_plan, scans

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

QUEUES, ACTORS = 8, 20
IN_WINDOW = 20_000


def _index_rows(plan: dict[str, Any], index: str) -> int:
    """Index entries the plan's scans of ``index`` returned, over all their loops."""
    return sum(
        int(node["Actual Rows"] * node["Actual Loops"])
        for node in scans(plan)
        if node.get("Index Name") == index
    )


async def test_the_fleet_statements_walk_their_indexes_on_a_big_table(pg: PgTarget) -> None:
    schema = pg.schema
    conn = await asyncpg.connect(pg.dsn)
    try:
        # 250k jobs: 100k pending (a third keyed, three priorities), 20k scheduled, 1k running,
        # 129k finished over ten days, IN_WINDOW of them within the last five minutes.
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, priority, fairness_key,
                    scheduled_at)
                SELECT gen_random_uuid(), 'actor_' || (n % {ACTORS}), 'q' || (n % {QUEUES}),
                       'pending', (n % 3) * 10, CASE WHEN n % 3 = 0 THEN 'tenant-' || (n % 50) END,
                       now() - make_interval(secs => n)
                FROM generate_series(1, 100000) AS n"""
        )
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, scheduled_at)
                SELECT gen_random_uuid(), 'actor_' || (n % {ACTORS}), 'q' || (n % {QUEUES}),
                       'scheduled', now() + make_interval(secs => n)
                FROM generate_series(1, 20000) AS n"""
        )
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, scheduled_at, claimed_at,
                    started_at, locked_by_worker, lock_expires_at)
                SELECT gen_random_uuid(), 'actor_' || (n % {ACTORS}), 'q' || (n % {QUEUES}),
                       'running', now() - interval '10 seconds', now(),
                       CASE WHEN n % 2 = 0 THEN now() END, gen_random_uuid(),
                       now() + interval '1 minute'
                FROM generate_series(1, 1000) AS n"""
        )
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, scheduled_at, started_at,
                    finished_at)
                SELECT gen_random_uuid(), 'actor_' || (n % {ACTORS}), 'q' || (n % {QUEUES}),
                       (ARRAY['succeeded', 'failed', 'crashed'])[1 + n % 3]::{schema}.job_status,
                       f - interval '3 seconds', f - interval '2 seconds', f
                FROM (SELECT n, CASE WHEN n <= {IN_WINDOW}
                                     THEN now() - make_interval(secs => n * 0.01)
                                     ELSE now() - interval '1 hour' - make_interval(secs => n * 6)
                                END AS f
                      FROM generate_series(1, 129000) AS n) x"""
        )
        await conn.execute(f"ANALYZE {schema}.jobs")

        queues = await generic_plan(conn, render("fleet_queues", schema), analyze=True)
        assert not [
            n
            for n in scans(queues)
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
        ]
        # One probe per queue finds the pending queues (plus the one that finds none), and
        # one per (status, queue) pair the others; the scheduled counts read only scheduled
        # entries (five statuses besides pending here).
        assert _index_rows(queues, "jobs_status_queue_idx") <= 20_000 + 5 * QUEUES + 1
        records = await conn.fetch(render("fleet_queues", schema))
        assert [r["name"] for r in records] == [f"q{n}" for n in range(QUEUES)]
        assert sum(r["scheduled"] for r in records) == 20_000

        actors = await generic_plan(conn, render("fleet_actors", schema), analyze=True)
        assert not [
            n
            for n in scans(actors)
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
        ]
        pairs = QUEUES * ACTORS // 4  # n % 8 and n % 20 meet in 40 pairs
        # The pair probes plus each pair's pending entries, counted once.
        assert _index_rows(actors, "jobs_dispatch_idx") <= 100_000 + pairs + 1

        finished = await generic_plan(
            conn, render("fleet_finished", schema), "interval", "'5 minutes'", analyze=True
        )
        found = scans(finished)
        assert not [
            n for n in found if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
        ]
        # The window's finished rows come from jobs_finished_idx, nothing older.
        assert {n.get("Index Name") for n in found} >= {"jobs_finished_idx"}
        assert _index_rows(finished, "jobs_finished_idx") == IN_WINDOW
    finally:
        await conn.close()
