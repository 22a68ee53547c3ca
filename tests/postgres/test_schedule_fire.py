"""The leader's fire on PostgreSQL, where two leaders can overlap for a moment: a schedule
another tick holds is skipped (FOR UPDATE SKIP LOCKED), a fire time whose job exists gets
no second one (the unique index on jobs.unique_key), concurrent ticks on two connections make
one job per fire time, and the pick walks schedules_due_idx however many schedules exist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import ScheduleSpec, schedule_job_key
from taskq_core.cron_timing import Schedule
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import generic_plan, scan_names

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

DAILY = Schedule("0 3 * * *")


@pytest.fixture
async def backends(pg: PgTarget) -> AsyncIterator[tuple[PostgresBackend, PostgresBackend]]:
    """Two backends on the schema: two leaders' pools, never sharing a connection."""
    first = await PostgresBackend.connect(pg.dsn, pg.schema)
    second = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield first, second
    await first.close()
    await second.close()


async def make_due(conn: asyncpg.Connection, schema: str, name: str) -> datetime:
    """Plan ``name``'s next fire at its latest fire time (now due); returns that time."""
    now = await conn.fetchval("SELECT clock_timestamp()")
    fire_at = DAILY.latest_fire(now)
    await conn.execute(
        f"UPDATE {schema}.schedules SET next_fire_at = $2 WHERE name = $1", name, fire_at
    )
    return fire_at


async def jobs_per_key(conn: asyncpg.Connection, schema: str) -> dict[str, int]:
    records = await conn.fetch(
        f"SELECT unique_key, count(*) AS n FROM {schema}.jobs GROUP BY unique_key"
    )
    return {r["unique_key"]: r["n"] for r in records}


def daily(name: str) -> ScheduleSpec:
    return ScheduleSpec(name=name, actor="report", cron=DAILY.expression)


async def test_a_schedule_another_tick_holds_is_skipped(
    backends: tuple[PostgresBackend, PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    backend, _ = backends
    await backend.create_schedule(daily("nightly"))
    await make_due(conn, pg.schema, "nightly")
    async with conn.transaction():  # another leader's tick, between its pick and its commit
        await conn.execute(f"SELECT 1 FROM {pg.schema}.schedules FOR UPDATE")
        assert await backend.fire_due_schedules(10) == []
    [fired] = await backend.fire_due_schedules(10)
    assert fired.job_id is not None


async def test_a_stale_pick_of_a_fired_time_inserts_no_second_job(
    backends: tuple[PostgresBackend, PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    backend, _ = backends
    await backend.create_schedule(daily("nightly"))
    fire_at = await make_due(conn, pg.schema, "nightly")
    [first] = await backend.fire_due_schedules(10)
    # A second leader that read the row before the first one's commit fires the same time.
    await make_due(conn, pg.schema, "nightly")
    [second] = await backend.fire_due_schedules(10)
    assert first.fire_at == second.fire_at == fire_at
    assert first.job_id is not None and second.job_id is None
    row = await backend.get_schedule("nightly")
    assert row is not None and row.last_job_id is None and row.last_fired_at == fire_at
    assert await jobs_per_key(conn, pg.schema) == {schedule_job_key("nightly", fire_at): 1}


async def test_concurrent_ticks_on_two_connections_make_one_job_per_fire_time(
    backends: tuple[PostgresBackend, PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    first, second = backends
    names = [f"s{index}" for index in range(20)]
    for name in names:
        await first.create_schedule(daily(name))
    fire_times = {}
    for round_ in range(3):  # each round replays the same fire times: rounds 2 and 3 add none
        for name in names:
            fire_times[name] = await make_due(conn, pg.schema, name)
        ticks = await asyncio.gather(first.fire_due_schedules(5), second.fire_due_schedules(5))
        while any(len(tick) == 5 for tick in ticks):  # full batches: more may be due
            ticks = await asyncio.gather(first.fire_due_schedules(5), second.fire_due_schedules(5))
        made = await jobs_per_key(conn, pg.schema)
        assert made == {schedule_job_key(n, fire_times[n]): 1 for n in names}, f"round {round_}"
    left = await conn.fetchval(
        f"SELECT count(*) FROM {pg.schema}.schedules WHERE next_fire_at <= clock_timestamp()"
    )
    assert left == 0


async def test_the_pick_walks_the_due_index_among_many_schedules(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    schema = pg.schema
    # 10,000 enabled schedules, 100 of them due; 1,000 disabled ones long overdue.
    await conn.execute(
        f"""INSERT INTO {schema}.schedules (id, name, actor, cron, enabled, next_fire_at)
            SELECT gen_random_uuid(), 's' || n, 'report', '0 3 * * *', n <= 10000,
                   CASE WHEN n <= 10000
                        THEN clock_timestamp() + make_interval(secs => (n - 100) * 8)
                        ELSE clock_timestamp() - interval '1 day' END
            FROM generate_series(1, 11000) AS n"""
    )
    await conn.execute(f"ANALYZE {schema}.schedules")
    plan = await generic_plan(conn, render("fire_due_pick", schema), "integer", "100")
    # The lateral's subquery (its LIMIT and lock) over one scan: the partial due index.
    assert [name for name in scan_names(plan) if "Subquery" not in name] == [
        "Index Scan schedules_due_idx"
    ]
