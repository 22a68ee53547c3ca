"""The operator's job lookups stay index-backed on a big table: a job id prefix is a range
of the primary keys, and a page of ``jobs list`` (and of the admin UI's jobs page, with its
finished-at and batch filters) walks an index to its limit (no sequential scan of jobs)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.postgres.queries import render
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

ROWS = 100_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


async def _plan(conn: asyncpg.Connection, schema: str, name: str, *args: Any) -> dict[str, Any]:
    async with conn.transaction():
        # How the backend runs these: custom plans for the actual arguments.
        await conn.execute(render("use_custom_plans", schema))
        raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {render(name, schema)}", *args)
    plan: dict[str, Any] = json.loads(raw)[0]["Plan"]
    return plan


def _seq_scans(plan: dict[str, Any]) -> list[str]:
    return [n["Relation Name"] for n in _nodes(plan) if n["Node Type"] == "Seq Scan"]


BATCH = UUID("0196a3b2-0000-7000-8000-00000000b001")
# statuses, queues, actors, since, since age, until, until age, finished since, its age,
# finished until, its age, batch
_ANY: tuple[Any, ...] = (None,) * 12
SEARCHES: list[tuple[Any, ...]] = [
    _ANY,
    (None, None, None, None, timedelta(hours=1), *_ANY[5:]),
    (["failed"], *_ANY[1:]),
    (None, ["q3", "q5"], *_ANY[2:]),
    (None, None, None, None, None, None, None, None, timedelta(minutes=10), *_ANY[9:]),
    (["failed"], *_ANY[1:8], timedelta(minutes=10), *_ANY[9:]),
    (*_ANY[:9], None, timedelta(hours=20), None),
    (*_ANY[:11], BATCH),
    (["failed"], *_ANY[1:11], BATCH),
    # A status no job has: the planner sees the statuses (they must not hide in a cast).
    (["crashed"], *_ANY[1:]),
    # A queue no job has: its waiting and its other jobs each have an index by queue.
    (None, ["nowhere"], *_ANY[2:]),
]
# A quarter of the table each, and the terminal jobs that finished over 20 hours ago.
NOT_SELECTIVE = [SEARCHES[2], SEARCHES[3], SEARCHES[6]]
# after at, after id, limit
FIRST_PAGE = (None, None, 101)


async def test_lookups_use_indexes_on_a_big_table(pg: PgTarget) -> None:
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
        # The terminal ones finished a second after their creation; one job in 200 carries
        # a batch id, a fifth of those BATCH's.
        await conn.execute(
            f"""UPDATE {pg.schema}.jobs
                SET finished_at = created_at + interval '1 second'
                WHERE status IN ('succeeded', 'failed')"""
        )
        await conn.execute(
            f"""UPDATE {pg.schema}.jobs
                SET metadata = jsonb_build_object('batch_id', CASE
                    WHEN random() < 0.2 THEN $1::uuid::text ELSE gen_random_uuid()::text END)
                WHERE random() < 0.005""",
            BATCH,
        )
        await conn.execute(f"ANALYZE {pg.schema}.jobs")
        low, high = UUID("0196a3b2" + "0" * 24), UUID("0196a3b2" + "f" * 24)
        prefix = await _plan(conn, pg.schema, "find_job_ids_by_prefix", low, high, 21)
        assert _seq_scans(prefix) == []
        for args in SEARCHES:
            page = await _plan(conn, pg.schema, "search_jobs", *args, *FIRST_PAGE)
            assert _seq_scans(page) == [], f"sequential scan for {args}"
        # Counting a few matches walks an index too (counting many may read the table in
        # order: the count stops at count_max either way).
        for args in SEARCHES:
            if args in (_ANY, *NOT_SELECTIVE):
                continue
            counted = await _plan(conn, pg.schema, "count_search_jobs", *args, 100_001)
            assert _seq_scans(counted) == [], f"sequential scan counting {args}"
    finally:
        await conn.close()
