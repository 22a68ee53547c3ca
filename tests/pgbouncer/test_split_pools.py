"""Which connection goes where when the pooled DSN is a real PgBouncer in transaction mode.

PgBouncer here appends the client's address to ``application_name`` ("taskq_x - 127.0.0.1:N"),
so a session tells whether it came through PgBouncer. Statements and short transactions do;
everything that keeps state in its session (LISTEN, the leader's lock, the sweeps' locks) and
the worker's dispatch and heartbeat pools reach the server directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from chaos.pgbouncer import PgBouncer
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.ids import uuid7
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

PRUNE_LOCK = "taskq:prune"


@pytest.fixture
async def split(pg: PgTarget, pgbouncer: PgBouncer) -> AsyncIterator[PostgresBackend]:
    """A backend as a worker opens it: pooled DSN through PgBouncer, the rest direct."""
    backend = await PostgresBackend.connect(
        pgbouncer.dsn(),
        pg.schema,
        direct_dsn=pg.dsn,
        dispatch_pool_size=1,
        heartbeat_pool_size=1,
    )
    yield backend
    await backend.close()


@pytest.fixture
async def server(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg.dsn)
    yield conn
    await conn.close()


async def _session_names(server: asyncpg.Connection, schema: str) -> set[str]:
    """application_name of every server session this test's backend opened."""
    records = await server.fetch(
        "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE $1",
        f"taskq%{schema}%",
    )
    return {r["application_name"] for r in records}


async def test_statements_go_through_pgbouncer_and_sessions_stay_direct(
    pg: PgTarget, split: PostgresBackend, server: asyncpg.Connection
) -> None:
    name = f"taskq_{pg.schema}"
    through = await split._pool.fetchval("SELECT current_setting('application_name')")
    assert through.startswith(f"{name} - 127.0.0.1:")  # PgBouncer's mark
    for direct in (split._dispatch_pool, split._heartbeat_pool, split._session_pool):
        assert await direct.fetchval("SELECT current_setting('application_name')") == name

    # The leader's and the LISTEN sessions are dedicated direct connections.
    assert await split.try_acquire_leadership(uuid7())
    async with split.subscribe_wake() as woken:
        await split.enqueue(EnqueueArgs("echo", {}))  # through PgBouncer: its NOTIFY too
        async with asyncio.timeout(10):
            await woken.wait()
        names = await _session_names(server, pg.schema)
    assert {f"taskq_leader_{pg.schema}", f"taskq_listen_{pg.schema}"} <= names


async def test_a_sweep_lock_is_held_by_a_direct_session(
    pg: PgTarget, split: PostgresBackend, server: asyncpg.Connection
) -> None:
    async with split.sweep_lock(PRUNE_LOCK) as got:
        assert got
        holders = await server.fetch(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.objid::bigint = "
            "(hashtextextended($1, 0) & 4294967295)",
            f"{PRUNE_LOCK}:{pg.schema}",
        )
        assert [r["application_name"] for r in holders] == [f"taskq_{pg.schema}"]
        # Held across any amount of pooled traffic, which lands on other server sessions.
        for _ in range(20):
            await split.enqueue(EnqueueArgs("echo", {}))
        async with split.sweep_lock(PRUNE_LOCK) as again:
            assert again is False
