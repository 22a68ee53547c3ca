"""The leader's own vacuum of the jobs table: it runs when the statistics say dead rows piled
up, and not before."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

DEAD = 3_000


async def _vacuums(conn: asyncpg.Connection, schema: str) -> int:
    count: int = await conn.fetchval(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass",
        f"{schema}.jobs",
    )
    return count


async def test_the_jobs_table_is_vacuumed_once_dead_rows_pile_up(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        # Autovacuum must not clean up behind the test's back.
        await conn.execute(f"ALTER TABLE {pg.schema}.jobs SET (autovacuum_enabled = false)")
        await conn.execute(
            f"INSERT INTO {pg.schema}.jobs (id, actor, queue, payload) "
            "SELECT gen_random_uuid(), 'a', 'q', '{}'::jsonb FROM generate_series(1, $1)",
            DEAD,
        )
        assert not await backend.vacuum_jobs(1_000, 0.01)  # nothing dead yet
        await conn.execute(f"DELETE FROM {pg.schema}.jobs")
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT 1")  # a transaction end: the counts reach the statistics
        before = await _vacuums(conn, pg.schema)
        assert not await backend.vacuum_jobs(10 * DEAD, 0.01)  # fewer dead rows than asked
        async with asyncio.timeout(30):
            while not await backend.vacuum_jobs(1_000, 0.01):
                await conn.execute("SELECT pg_stat_force_next_flush()")
                await asyncio.sleep(0.1)  # statistics flush on their own schedule
        async with asyncio.timeout(30):
            while await _vacuums(conn, pg.schema) == before:
                await asyncio.sleep(0.1)
        # The dead rows are gone: nothing is due any more.
        await conn.execute("SELECT pg_stat_force_next_flush()")
        assert not await backend.vacuum_jobs(1_000, 0.01)
    finally:
        await backend.close()
        await conn.close()
