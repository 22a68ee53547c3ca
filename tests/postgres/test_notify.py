"""The LISTEN connection: opened lazily, healed after the server drops it, closed with the
backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, notify_health_check_interval=0.2)
    yield opened
    await opened.close()


async def listeners(pg: PgTarget) -> list[int]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            f"taskq_listen_{pg.schema}",
        )
        return [row["pid"] for row in rows]
    finally:
        await conn.close()


async def test_the_listen_connection_opens_with_the_first_subscriber(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    assert await listeners(pg) == []
    async with backend.subscribe_wake():
        assert len(await listeners(pg)) == 1
        async with backend.subscribe_cancel_wake():
            assert len(await listeners(pg)) == 1  # one connection serves every subscriber


async def test_a_dropped_listen_connection_reconnects_and_wakes_everyone_once(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    async with backend.subscribe_wake() as woken, backend.subscribe_cancel_wake() as cancel:
        [pid] = await listeners(pg)
        conn = await asyncpg.connect(pg.dsn)
        try:
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await conn.close()
        async with asyncio.timeout(10):
            await woken.wait()  # the drain poll after the reconnect
            await cancel.wait()
        assert backend.listener.reconnects == 1
        assert (await listeners(pg)) != [pid]
        woken.clear()
        await backend.enqueue(EnqueueArgs("after"))
        async with asyncio.timeout(5):
            await woken.wait()  # LISTEN is live again


async def test_close_releases_the_listen_connection(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    async with backend.subscribe_wake():
        assert len(await listeners(pg)) == 1
    await backend.close()
    await backend.close()  # idempotent
    for _ in range(50):
        if not await listeners(pg):
            break
        await asyncio.sleep(0.05)
    assert await listeners(pg) == []
    with pytest.raises(RuntimeError, match="closed"):
        async with backend.subscribe_wake():
            pass
