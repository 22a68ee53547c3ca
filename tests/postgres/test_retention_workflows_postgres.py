"""Retention of workflows on a real database: a workflow one of whose steps (or whose row)
another session holds is left whole and moved on a later pass, its edges go with its row,
and the prune's plans: a batch the jobs outside workflows fill reads nothing of workflows,
and the workflow part walks its indexes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import (
    add_finished_jobs,
    add_histories,
    generic_plan,
    scan_names,
    scans,
)

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

POLICY = PrunePolicy(
    retention={JobStatus.SUCCEEDED: timedelta(days=1)}, archive_for=timedelta(days=30)
)
BATCH_TYPES = "text[], interval[], text, bigint, interval"


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    yield opened
    await opened.close()


async def _add_ended_workflows(
    conn: asyncpg.Connection, schema: str, count: int, steps: int, *, status: str = "succeeded"
) -> list[UUID]:
    """``count`` workflows of ``status`` (running: no end) with ``steps`` succeeded steps
    each, a chain of edges, all ended two days ago; returns the workflows' ids."""
    ids: list[UUID] = await conn.fetchval(
        f"""WITH w AS (
                INSERT INTO {schema}.workflows (id, status, created_at, finished_at)
                SELECT gen_random_uuid(), $3, now() - interval '3 days',
                       CASE WHEN $3 <> 'running' THEN now() - interval '2 days' END
                FROM generate_series(1, $1)
                RETURNING id
            ),
            made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at, metadata)
                SELECT gen_random_uuid(), 'step', 'wf', 'succeeded', 1,
                       now() - interval '2 days' - make_interval(secs => k),
                       jsonb_build_object('workflow_id', w.id::text, 'workflow_step', 's' || k)
                FROM w CROSS JOIN generate_series(1, $2) AS k
                RETURNING id, metadata->>'workflow_id' AS workflow_id,
                          metadata->>'workflow_step' AS step
            ),
            edges AS (
                INSERT INTO {schema}.workflow_edges (workflow_id, parent_id, child_id)
                SELECT p.workflow_id::uuid, p.id, c.id
                FROM made p JOIN made c ON c.workflow_id = p.workflow_id
                 AND substr(c.step, 2)::int = substr(p.step, 2)::int + 1
            )
            SELECT array_agg(id ORDER BY id) FROM w""",
        count,
        steps,
        status,
    )
    return ids


async def _left(conn: asyncpg.Connection, schema: str, workflow_id: UUID) -> dict[str, int]:
    record = await conn.fetchrow(
        f"""SELECT
              (SELECT count(*) FROM {schema}.jobs
               WHERE metadata->>'workflow_id' = $1::uuid::text AND metadata ? 'workflow_id')
                 AS live,
              (SELECT count(*) FROM {schema}.jobs_archive
               WHERE metadata->>'workflow_id' = $1::uuid::text) AS archived,
              (SELECT count(*) FROM {schema}.workflows WHERE id = $1::uuid) AS rows,
              (SELECT count(*) FROM {schema}.workflow_edges WHERE workflow_id = $1::uuid)
                 AS edges""",
        workflow_id,
    )
    assert record is not None
    return dict(record)


@pytest.mark.parametrize("hold", ["a step", "the workflow's row"])
async def test_a_workflow_another_session_holds_is_left_whole_for_a_later_pass(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget, hold: str
) -> None:
    schema = pg.schema
    held, free = await _add_ended_workflows(conn, schema, 2, 3)
    lock = (
        f"""SELECT 1 FROM {schema}.jobs WHERE metadata ? 'workflow_id'
              AND metadata->>'workflow_id' = $1::uuid::text LIMIT 1 FOR UPDATE"""
        if hold == "a step"
        else f"SELECT 1 FROM {schema}.workflows WHERE id = $1 FOR UPDATE"
    )
    async with conn.transaction():  # an operator's retry, say, in the middle of its write
        await conn.execute(lock, held)
        assert (await backend.prune_jobs(POLICY)).total == 3
        assert await _left(conn, schema, held) == {"live": 3, "archived": 0, "rows": 1, "edges": 2}
    assert await _left(conn, schema, free) == {"live": 0, "archived": 3, "rows": 0, "edges": 0}
    assert (await backend.prune_jobs(POLICY)).total == 3
    assert await _left(conn, schema, held) == {"live": 0, "archived": 3, "rows": 0, "edges": 0}
    assert await backend.get_workflow(held) is None


def _executed(plan: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The scans on index or table ``name`` that ran at least once."""
    return [
        node
        for node in scans(plan)
        if name in (node.get("Index Name"), node.get("Relation Name"))
        and node.get("Actual Loops", 0) > 0
    ]


@pytest.mark.slow
async def test_the_prune_reads_workflows_only_in_the_room_jobs_outside_them_leave(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    schema = pg.schema
    # 100k jobs finished over the last ten days (half terminal), a few hundred workflows:
    # ended and due, ended not long enough ago, running with steps ended long ago.
    await add_finished_jobs(conn, schema, 100000, 8)
    await _add_ended_workflows(conn, schema, 200, 5)
    await _add_ended_workflows(conn, schema, 50, 5, status="running")
    await add_histories(conn, schema)
    for table in ("jobs", "job_attempts", "job_events", "workflows", "workflow_edges"):
        await conn.execute(f"ANALYZE {schema}.{table}")
    batch = render("prune_jobs_batch", schema)
    # Thousands of jobs outside workflows are due: they fill a batch of 1000, whose plan reads
    # nothing of workflows (each of those scans is never run) and walks jobs_finished_idx once.
    full = await generic_plan(
        conn, batch, BATCH_TYPES, "'{succeeded}', '{1 day}', NULL, 1000, '30 days'", analyze=True
    )
    for name in ("workflows", "workflows_finished_idx", "workflows_pkey", "jobs_workflow_idx"):
        assert _executed(full, name) == [], name
    assert len(_executed(full, "jobs_finished_idx")) == 1
    # A batch with room walks the ended workflows by workflows_finished_idx and finds each
    # one's steps by jobs_workflow_idx; never a scan of jobs.
    roomy = await generic_plan(
        conn, batch, BATCH_TYPES, "'{succeeded}', '{1 day}', NULL, 100000, '30 days'", analyze=True
    )
    names = scan_names(roomy)
    assert _executed(roomy, "workflows_finished_idx"), names
    assert _executed(roomy, "jobs_workflow_idx"), names
    assert "Seq Scan jobs" not in names, names
    count = await generic_plan(
        conn,
        render("prune_jobs_count", schema),
        "text[], interval[], text",
        "'{succeeded}', '{1 day}', NULL",
        analyze=True,
    )
    assert "Seq Scan jobs" not in scan_names(count), scan_names(count)
    assert _executed(count, "workflows_finished_idx"), scan_names(count)
