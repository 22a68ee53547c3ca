"""The dispatch statements stay index-backed on a big backlog, in the generic plan the worker
pool uses: no sequential scan of jobs, whatever caps and queue modes are configured."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

BACKLOG = 100_000


def _seq_scans(plan: dict[str, Any]) -> list[str]:
    found = [plan.get("Relation Name", "")] if plan["Node Type"] == "Seq Scan" else []
    for child in plan.get("Plans", []):
        found += _seq_scans(child)
    return found


async def _generic_plan_scans(
    conn: asyncpg.Connection, schema: str, queues: list[str], statement: str
) -> list[str]:
    await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
    await conn.execute(
        f"PREPARE dispatch(text[], int, uuid, interval, int) AS {render(statement, schema)}"
    )
    scans: list[str] = []
    for _ in range(6):
        tx = conn.transaction()
        await tx.start()
        literal = "ARRAY[" + ", ".join(f"'{q}'" for q in queues) + "]"  # test-owned names
        raw = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) EXECUTE dispatch({literal}, 64, gen_random_uuid(), '60s', 2)"
        )
        await tx.rollback()
        scans = _seq_scans(json.loads(raw)[0]["Plan"])
    await conn.execute("DEALLOCATE dispatch")
    return scans


async def test_dispatch_never_scans_the_backlog(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        for _ in range(BACKLOG // 50_000):
            await backend.enqueue_batch_fast([EnqueueArgs("bulk", {}) for _ in range(50_000)])
        await backend.enqueue_batch_fast(
            [EnqueueArgs("fair", {}, queue="rr", fairness_key=f"t{n % 50}") for n in range(5_000)]
        )
        await backend.update_queue("rr", mode="round_robin")
        # A capped actor with nothing pending: its probe must not read the bulk backlog.
        await backend.sync_actor_configs(
            [ActorDeclaration("capped", "default", {}, 2, None, None)], force=False
        )
    finally:
        await backend.close()
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(f"VACUUM ANALYZE {pg.schema}.jobs")
        for statement in ("dispatch_batch", "dispatch_plain"):
            for queues in (["default"], ["rr"], ["default", "rr"]):
                scans = await _generic_plan_scans(conn, pg.schema, queues, statement)
                assert "jobs" not in scans, f"sequential scan of jobs: {statement} {queues}"
    finally:
        await conn.close()
