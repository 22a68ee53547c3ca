"""The operator's job lookups stay index-backed on a big table: a job id prefix is a range
of the primary keys, and a page of ``jobs list`` walks an index to its limit (no sequential
scan of jobs)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.postgres.queries import render
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

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


SEARCHES: list[tuple[Any, ...]] = [
    # statuses, queues, actors, since, since age, until, until age, after at, after id, limit
    (None, None, None, None, None, None, None, None, None, 101),
    (None, None, None, None, timedelta(hours=1), None, None, None, None, 101),
    (["failed"], None, None, None, None, None, None, None, None, 101),
    (None, ["q3", "q5"], None, None, None, None, None, None, None, 101),
]


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
        await conn.execute(f"ANALYZE {pg.schema}.jobs")
        low, high = UUID("0196a3b2" + "0" * 24), UUID("0196a3b2" + "f" * 24)
        prefix = await _plan(conn, pg.schema, "find_job_ids_by_prefix", low, high, 21)
        assert _seq_scans(prefix) == []
        for args in SEARCHES:
            page = await _plan(conn, pg.schema, "search_jobs", *args)
            assert _seq_scans(page) == [], f"sequential scan for {args}"
    finally:
        await conn.close()
