"""Retention under real concurrency, and its index paths.

What only a real database can show: two prunes at once (a rolling deploy's two leaders) move
each row exactly once, a row another session holds is skipped and moved on a later pass, an
open prune batch never blocks dispatch, settle or enqueue, and the prune and expiry picks
walk their indexes on a big table.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

LEASE = timedelta(minutes=5)
KEEP = timedelta(days=1)
ARCHIVE_FOR = timedelta(days=30)
OLD_QUEUE = "old"
# A dispatcher whose statements fail fast instead of waiting on a lock: if a prune blocked
# dispatch, the dispatch call would raise rather than pass.
NO_WAITING = "lock_timeout=200&statement_timeout=10000"


def _policy(batch_size: int) -> PrunePolicy:
    return PrunePolicy(
        retention={JobStatus.SUCCEEDED: KEEP}, archive_for=ARCHIVE_FOR, batch_size=batch_size
    )


async def _add_due_jobs(conn: asyncpg.Connection, schema: str, count: int) -> None:
    """``count`` succeeded jobs finished two days ago, each with one attempt and one event."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at)
                SELECT gen_random_uuid(), 'work', $2, 'succeeded', 1,
                       clock_timestamp() - interval '2 days'
                FROM generate_series(1, $1)
                RETURNING id, finished_at
            ),
            attempts AS (
                INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
                SELECT id, 1, 'succeeded', finished_at FROM made
            )
            INSERT INTO {schema}.job_events (job_id, kind, to_status)
            SELECT id, 'state_change', 'succeeded' FROM made""",
        count,
        OLD_QUEUE,
    )


async def _counts(conn: asyncpg.Connection, schema: str) -> dict[str, int]:
    """Rows of the old queue left live, and what the archive holds."""
    record = await conn.fetchrow(
        f"""SELECT
              (SELECT count(*) FROM {schema}.jobs WHERE queue = $1) AS live,
              (SELECT count(*) FROM {schema}.job_attempts) AS live_attempts,
              (SELECT count(*) FROM {schema}.job_events) AS events,
              (SELECT count(*) FROM {schema}.jobs_archive) AS archived,
              (SELECT count(DISTINCT id) FROM {schema}.jobs_archive) AS archived_ids,
              (SELECT count(*) FROM {schema}.job_attempts_archive) AS archived_attempts""",
        OLD_QUEUE,
    )
    assert record is not None
    return dict(record)


@pytest.fixture
async def backends(pg: PgTarget) -> AsyncIterator[list[PostgresBackend]]:
    """Two backend instances on the same schema, each with its own pool."""
    opened = [await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2) for _ in range(2)]
    yield opened
    for backend in opened:
        await backend.close()


@pytest.fixture
async def dispatcher(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    """A backend whose statements raise after 200 ms waiting for a lock."""
    joiner = "&" if "?" in pg.dsn else "?"  # the embedded server's DSN has a query already
    dsn = f"{pg.dsn}{joiner}{NO_WAITING}"
    probe = await asyncpg.connect(dsn)
    try:  # the fail-fast setting really reaches the session, or the tests prove nothing
        assert await probe.fetchval("SHOW lock_timeout") == "200ms"
    finally:
        await probe.close()
    backend = await PostgresBackend.connect(dsn, pg.schema, max_size=2)
    yield backend
    await backend.close()


async def test_the_archive_tables_have_every_column_of_the_live_ones(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    # The prune names its columns: a column added to jobs or job_attempts by a migration must
    # reach the archive table (and sql/retention.sql) too.
    records = await conn.fetch(
        """SELECT table_name, column_name, data_type, is_nullable
           FROM information_schema.columns WHERE table_schema = $1""",
        pg.schema,
    )
    columns: dict[str, set[tuple[str, str, str]]] = {}
    for r in records:
        columns.setdefault(r["table_name"], set()).add(
            (r["column_name"], r["data_type"], r["is_nullable"])
        )
    stamps = {("archived_at", "timestamp with time zone", "NO")}
    stamps.add(("expire_at", "timestamp with time zone", "NO"))
    assert columns["jobs_archive"] == columns["jobs"] | stamps
    # An archived attempt carries its job's expire_at, its day partition's key (NULL on the
    # rows archived before the archive was partitioned).
    expiry = {("expire_at", "timestamp with time zone", "YES")}
    assert columns["job_attempts_archive"] == columns["job_attempts"] | expiry


async def test_two_prunes_at_once_move_each_job_exactly_once(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 3000)
    first, second = await asyncio.gather(*(b.prune_jobs(_policy(50)) for b in backends))
    assert first.total + second.total == 3000
    for result in (first, second):
        assert set(result.moved) <= {(JobStatus.SUCCEEDED, OLD_QUEUE)}
    assert await _counts(conn, pg.schema) == {
        "live": 0,
        "live_attempts": 0,
        "events": 0,
        "archived": 3000,
        "archived_ids": 3000,
        "archived_attempts": 3000,
    }


async def test_a_job_another_session_holds_is_skipped_and_moved_later(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 10)
    held: UUID = await conn.fetchval(f"SELECT id FROM {pg.schema}.jobs LIMIT 1")
    async with conn.transaction():
        await conn.execute(f"SELECT 1 FROM {pg.schema}.jobs WHERE id = $1 FOR UPDATE", held)
        result = await backends[0].prune_jobs(_policy(3))
        assert (result.total, result.batches) == (9, 4)
        assert await backends[0].get_archived_job(held) is None
    assert (await backends[0].prune_jobs(_policy(3))).total == 1
    assert await backends[0].get(held) is None
    assert await backends[0].get_archived_job(held) is not None


async def test_an_open_prune_batch_blocks_neither_dispatch_nor_settle_nor_enqueue(
    dispatcher: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 500)
    waiting = await dispatcher.enqueue_batch([EnqueueArgs("work", {"n": n}) for n in range(20)])
    worker = uuid4()
    async with conn.transaction():
        # One prune batch, moved but not committed: it holds every lock a batch takes.
        moved = await conn.fetch(
            render("prune_jobs_batch", pg.schema),
            ["succeeded"],
            [KEEP],
            None,
            500,
            ARCHIVE_FOR,
        )
        assert [(r["status"], r["count"]) for r in moved] == [("succeeded", 500)]
        claimed = await dispatcher.dispatch_batch(worker, ["default"], 10, LEASE)
        assert [row.id for row in claimed] == [job.id for job in waiting[:10]]
        assert await dispatcher.mark_succeeded(claimed[0].lease(), {"ok": True})
        await dispatcher.enqueue(EnqueueArgs("work", {"n": "during"}))
    assert (await _counts(conn, pg.schema))["archived"] == 500


async def test_dispatch_keeps_going_while_a_big_prune_runs_in_small_batches(
    backends: list[PostgresBackend],
    dispatcher: PostgresBackend,
    conn: asyncpg.Connection,
    pg: PgTarget,
) -> None:
    await _add_due_jobs(conn, pg.schema, 4000)
    await dispatcher.enqueue_batch_fast([EnqueueArgs("work", {"n": n}) for n in range(300)])
    pruning = asyncio.create_task(backends[0].prune_jobs(_policy(100)))
    claimed: list[UUID] = []
    worker = uuid4()
    while not pruning.done() or not claimed:
        rows = await dispatcher.dispatch_batch(worker, ["default"], 1, LEASE)
        claimed += [row.id for row in rows]
        if not rows:
            break
    result = await pruning
    assert (result.total, result.batches) == (4000, 41)
    assert claimed and len(set(claimed)) == len(claimed)


async def add_finished_jobs(
    conn: asyncpg.Connection, schema: str, count: int, seconds_apart: int
) -> None:
    """``count`` jobs over 8 queues, a quarter each pending, succeeded, failed and running;
    the ended ones finished ``seconds_apart`` seconds after one another, up to now."""
    await conn.execute(
        f"""INSERT INTO {schema}.jobs (id, actor, queue, status, finished_at)
            SELECT gen_random_uuid(), 'work', 'q' || (n % 8),
                   (ARRAY['pending', 'succeeded', 'failed', 'running'])[1 + n % 4]
                       ::{schema}.job_status,
                   CASE WHEN n % 4 IN (1, 2) THEN now() - make_interval(secs => n * $2) END
            FROM generate_series(1, $1) AS n""",
        count,
        seconds_apart,
    )


async def add_histories(conn: asyncpg.Connection, schema: str) -> None:
    """Each job's history: an attempt per finished job, an event per job."""
    await conn.execute(
        f"""WITH attempts AS (
                INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
                SELECT id, 1, 'succeeded', finished_at
                FROM {schema}.jobs WHERE finished_at IS NOT NULL
            )
            INSERT INTO {schema}.job_events (job_id, kind) SELECT id, 'state_change'
            FROM {schema}.jobs"""
    )


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _plan_nodes(child)
    return found


async def generic_plan(
    conn: asyncpg.Connection, sql: str, types: str = "", args: str = "", *, analyze: bool = False
) -> dict[str, Any]:
    """``sql``'s generic plan (how the pool runs it) as EXPLAIN's JSON, run for real when
    ``analyze`` (inside a transaction rolled back, so a write statement changes nothing)."""
    await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
    await conn.execute(f"PREPARE planned{f'({types})' if types else ''} AS {sql}")
    execute = f"EXECUTE planned{f'({args})' if args else ''}"
    rolled_back = conn.transaction()
    await rolled_back.start()
    try:
        raw = await conn.fetchval(
            f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) {execute}"
        )
    finally:
        await rolled_back.rollback()
        await conn.execute("DEALLOCATE planned")
    plan: dict[str, Any] = json.loads(raw)[0]["Plan"]
    return plan


def scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's table and index scans (not CTE or work-table scans)."""
    return [
        node
        for node in _plan_nodes(plan)
        if "Scan" in node["Node Type"]
        and "CTE" not in node["Node Type"]
        and "WorkTable" not in node["Node Type"]
    ]


def scan_names(plan: dict[str, Any]) -> list[str]:
    """Each scan as "<node> <index or table>"."""
    return [
        f"{node['Node Type']} {node.get('Index Name', node.get('Relation Name', ''))}"
        for node in scans(plan)
    ]


async def _generic_plan(conn: asyncpg.Connection, sql: str, types: str, args: str) -> list[str]:
    return scan_names(await generic_plan(conn, sql, types, args))


@pytest.mark.slow
async def test_the_prune_and_expiry_picks_walk_their_indexes_on_a_big_table(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    schema = pg.schema
    # 200k jobs finished over the last ten days (half terminal), 100k archived jobs.
    await add_finished_jobs(conn, schema, 200000, 4)
    await conn.execute(
        f"""INSERT INTO {schema}.jobs_archive (id, actor, queue, status, archived_at, expire_at)
            SELECT gen_random_uuid(), 'work', 'q', 'succeeded', now(),
                   now() + make_interval(secs => n)
            FROM generate_series(1, 100000) AS n"""
    )
    await add_histories(conn, schema)
    for table in ("jobs", "jobs_archive", "job_attempts", "job_events"):
        await conn.execute(f"ANALYZE {schema}.{table}")
    prune = await _generic_plan(
        conn,
        render("prune_jobs_batch", schema),
        "text[], interval[], text, bigint, interval",
        "'{succeeded,failed}', '{7 days,8 days}', NULL, 1000, '30 days'",
    )
    # The pick walks jobs_finished_idx per status; the delete finds its rows by primary key.
    assert any(scan.startswith("Index Scan") for scan in prune if "jobs_finished_idx" in scan)
    assert "Seq Scan jobs" not in prune, prune
    # The picked jobs' attempts and events are found by job, not by scanning their tables.
    assert "Index Scan job_attempts_job_idx" in prune, prune
    assert "Index Scan job_events_job_idx" in prune, prune
    assert not any(scan.startswith("Seq Scan job_") for scan in prune), prune
    # The dry run's count walks the same index per status, never the whole table.
    count = await _generic_plan(
        conn,
        render("prune_jobs_count", schema),
        "text[], interval[], text",
        "'{succeeded,failed}', '{7 days,8 days}', NULL",
    )
    assert any("jobs_finished_idx" in scan for scan in count), count
    assert "Seq Scan jobs" not in count, count
    expire = await _generic_plan(conn, render("expire_archive_batch", schema), "bigint", "1000")
    # The default partition's pick walks its expiry index; the deletes find the picked rows
    # and their attempts on an index (they used to hash the whole archive).
    assert "Index Scan jobs_archive_expire_idx" in expire, expire
    assert any("jobs_archive_default_id_idx" in scan for scan in expire), expire
    assert any("job_attempts_archive_job_idx" in scan for scan in expire), expire
    assert not any(scan.startswith("Seq Scan") for scan in expire), expire
