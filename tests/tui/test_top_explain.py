"""One dashboard refresh stays on indexes with 500,000 rows in ``jobs``.

The table is filled with INSERT ... SELECT generate_series (varied statuses, queues, actors
and times, a few hundred running), then ANALYZEd. Every statement a refresh sends is
recorded at the pool, prepared again on a connection planning the way the backend's do
(``plan_cache_mode = force_generic_plan``), and EXPLAINed with the refresh's own arguments:
no plan may read ``jobs`` with a sequential scan. The custom plans (what a server without
that setting would use) are held to the same rule. The one exception is the pause note of a
paused queue, which only ``get_queue`` returns (with that queue's counts): it must be read
once per session, not on every refresh.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.source import BackendSource
from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

ROWS = 500_000
# Per mille of the rows in each status; what is left over succeeded too.
SEED = """
INSERT INTO {schema}.jobs (
    id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
    attempt, started_at, finished_at, locked_by_worker, lock_expires_at, error_class,
    error_message, fairness_key)
SELECT gen_random_uuid(), 'actor_' || (g % 17), 'queue_' || (g % 8), jsonb_build_object('n', g),
       s.status::{schema}.job_status, (g % 3) * 5,
       CASE WHEN s.status = 'scheduled' THEN t.now + interval '1 hour' ELSE t.created END,
       t.created, t.created,
       CASE WHEN s.status IN ('pending', 'scheduled') THEN 0 ELSE 1 END,
       CASE WHEN s.status NOT IN ('pending', 'scheduled') THEN t.created + interval '1 second' END,
       CASE WHEN s.status NOT IN ('pending', 'scheduled', 'running')
            THEN t.created + interval '2 seconds' END,
       CASE WHEN s.status = 'running'
            THEN ('00000000-0000-4000-8000-00000000000' || (g % 4))::uuid END,
       CASE WHEN s.status = 'running' THEN t.now + interval '30 seconds' END,
       CASE WHEN s.status IN ('failed', 'crashed') THEN 'ValueError' END,
       CASE WHEN s.status IN ('failed', 'crashed') THEN 'boom ' || g END,
       'tenant_' || (g % 5)
FROM generate_series(1, {rows}) AS g
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN g % 1000 < 700 THEN 'succeeded' WHEN g % 1000 < 780 THEN 'failed'
        WHEN g % 1000 < 800 THEN 'cancelled' WHEN g % 1000 < 805 THEN 'crashed'
        WHEN g % 1000 < 806 THEN 'abandoned' WHEN g % 1000 < 900 THEN 'pending'
        WHEN g % 1000 < 950 THEN 'scheduled' WHEN g % 1000 < 952 THEN 'running'
        ELSE 'succeeded' END AS status
) s
CROSS JOIN LATERAL (
    -- A day of history: the newest job is from now, the oldest from about 28 hours ago.
    SELECT clock_timestamp() AS now, clock_timestamp() - g * interval '200 milliseconds' AS created
) t;
INSERT INTO {schema}.workers (id, hostname, pid, worker_label, queues, actors, concurrency)
SELECT ('00000000-0000-4000-8000-00000000000' || n)::uuid, 'node-' || n, 1000 + n,
       'worker-' || n, ARRAY['queue_' || n], ARRAY['actor_' || n], 500
FROM generate_series(0, 3) AS n;
INSERT INTO {schema}.maintenance_leader (name, worker_id)
VALUES ('maintenance', '00000000-0000-4000-8000-000000000000');
INSERT INTO {schema}.queues (name, paused) VALUES ('queue_7', true);
ANALYZE {schema}.jobs;
"""
# The statement of ``get_queue`` (and ``list_queues``), as the pool receives it.
PAUSE_NOTE_READ = "-- Every queue that has jobs or a row"
# The refreshes one session makes: the opening one, then the filters an operator types.
REFRESHES = [
    JobsFilter(),
    JobsFilter.parse("queue=queue_3"),
    JobsFilter.parse("status=pending actor=actor_5"),
    JobsFilter.parse("status=running"),
    JobsFilter.parse("status=all queue=queue_1 actor=actor_2"),
]


class RecordingPool:
    """An asyncpg pool that remembers every statement and its arguments."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._pool, name)
        if name not in ("fetch", "fetchrow", "fetchval", "execute"):
            return attribute

        async def recorded(query: str, *args: Any, **kwargs: Any) -> Any:
            self.statements.append((query, args))
            return await attribute(query, *args, **kwargs)

        return recorded


def seq_scans_of_jobs(plan: dict[str, Any]) -> list[str]:
    """Every plan node that reads ``jobs`` sequentially (parallel or not)."""
    found = []
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") == "jobs":
        found.append(f"Seq Scan on jobs (filter: {plan.get('Filter', '-')})")
    for child in plan.get("Plans", []):
        found += seq_scans_of_jobs(child)
    return found


def index_names(plan: dict[str, Any]) -> set[str]:
    """The indexes a plan walks."""
    names = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        names |= index_names(child)
    return names


@pytest.fixture
async def big_jobs_table(pg: PgTarget) -> AsyncIterator[PgTarget]:
    """The test schema with 500,000 jobs, analyzed."""
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(SEED.replace("{schema}", pg.schema).replace("{rows}", str(ROWS)))
        assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs") == ROWS
    finally:
        await conn.close()
    yield pg


async def _explain(
    conn: asyncpg.Connection, name: str, query: str, args: tuple[Any, ...]
) -> dict[str, Any]:
    """The plan the backend's prepared statement runs with these arguments."""
    types = [t for t in (await conn.prepare(query)).get_parameters()]
    literals = []
    for value, param in zip(args, types, strict=True):
        type_name = param.name if param.schema == "pg_catalog" else f"{param.schema}.{param.name}"
        literal = await conn.fetchval(f"SELECT quote_nullable($1::{type_name})", value)
        literals.append(f"{literal}::{type_name}")
    await conn.execute(f"PREPARE {name} AS {query}")
    placeholders = f"({', '.join(literals)})" if literals else ""
    document = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {name}{placeholders}")
    plan: dict[str, Any] = json.loads(document)[0]["Plan"]
    return plan


@pytest.mark.timeout(300)
async def test_one_refresh_uses_indexes_not_sequential_scans_of_jobs(
    big_jobs_table: PgTarget,
) -> None:
    pg = big_jobs_table
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    recorder = RecordingPool(backend._pool)
    backend._pool = recorder  # type: ignore[assignment]
    source = BackendSource(backend, database="test", schema=pg.schema)
    try:
        timings = []
        for jobs_filter in REFRESHES:
            await source.snapshot(jobs_filter)  # prepares the statements
            started = time.perf_counter()
            snapshot = await source.snapshot(jobs_filter)
            timings.append(time.perf_counter() - started)
            assert snapshot.queues and snapshot.workers
        first = await source.snapshot(JobsFilter())
    finally:
        await backend.close()
    assert sum(q.pending for q in first.queues) == ROWS // 1000 * 94
    assert first.leader is not None and first.jobs

    # The pause note of the paused queue (get_queue, which counts that queue's jobs: the
    # dashboard read does not carry the note) is read once per session, not per refresh.
    notes = [(q, args) for q, args in recorder.statements if q.startswith(PAUSE_NOTE_READ)]
    assert notes == [(notes[0][0], ("queue_7",))]
    assert first.pauses == {} and {q.name for q in first.queues if q.paused} == {"queue_7"}
    unique: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for query, args in recorder.statements:
        if not query.startswith(PAUSE_NOTE_READ):
            unique.setdefault(query + repr(args), (query, args))
    statements = list(unique.values())
    # stats, workers, the jobs pane, the limits' use (reads no jobs), the active batches,
    # the workflows (one statement: the running ones, and the newest)
    assert len({query for query, _ in statements}) == 6
    offenders: dict[str, list[str]] = {}
    walked: set[str] = set()
    for mode in ("force_generic_plan", "force_custom_plan"):
        conn = await asyncpg.connect(pg.dsn, server_settings={"plan_cache_mode": mode})
        try:
            for index, (query, args) in enumerate(statements):
                plan = await _explain(conn, f"refresh_{index}", query, args)
                walked |= index_names(plan)
                if scans := seq_scans_of_jobs(plan):
                    offenders[f"{mode}: {query.strip().splitlines()[0]} {args}"] = scans
        finally:
            await conn.close()
    assert offenders == {}
    # The reads walk the partial indexes made for them.
    assert {
        "jobs_fair_dispatch_idx",
        "jobs_keyed_dispatch_idx",
        "jobs_status_queue_idx",
        "jobs_finished_idx",
        "jobs_batch_idx",
        "jobs_workflow_idx",
    } <= walked, walked
    # Not a benchmark, but a refresh that takes seconds would be a regression worth seeing.
    assert max(timings) < 5.0, timings
