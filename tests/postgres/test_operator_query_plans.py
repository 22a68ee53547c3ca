"""Operator filter queries stay index-backed on a big table (no sequential scan of jobs)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.postgres.queries import render
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

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
