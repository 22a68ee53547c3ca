"""Sweep locks on PostgreSQL: session advisory locks shared by every backend instance on the
schema, namespaced per schema, gone with the session that held them, never left on a pooled
connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.constants import ARCHIVE_EXPIRY_LOCK, PRUNE_LOCK, PRUNE_LOCK_PREFIX
from tests.conftest import PgTarget, create_migrated_schema, drop_schema

pytestmark = pytest.mark.postgres

# The backends holding an advisory lock on the key $1, as pg_locks spells a bigint key.
_HOLDERS = """
    SELECT pid FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND classid::bigint = (hashtextextended($1, 0) >> 32) & 4294967295
      AND objid::bigint = hashtextextended($1, 0) & 4294967295
"""


@pytest.fixture
async def backends(pg: PgTarget) -> AsyncIterator[list[PostgresBackend]]:
    """Two backend instances on the same schema (two leaders, or a leader and the CLI)."""
    opened = [await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2) for _ in range(2)]
    yield opened
    for backend in opened:
        await backend.close()


async def _holders(conn: asyncpg.Connection, key: str) -> list[int]:
    return [record["pid"] for record in await conn.fetch(_HOLDERS, key)]


async def test_one_holder_across_backend_instances(backends: list[PostgresBackend]) -> None:
    first, second = backends
    async with first.sweep_lock(PRUNE_LOCK) as got:
        assert got
        async with second.sweep_lock(PRUNE_LOCK) as refused:
            assert not refused
        async with second.sweep_lock(ARCHIVE_EXPIRY_LOCK) as other_name:
            assert other_name
    async with second.sweep_lock(PRUNE_LOCK) as after:
        assert after


async def test_the_lock_is_per_schema_under_its_documented_key(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    key = PRUNE_LOCK_PREFIX + pg.schema
    other_schema = await create_migrated_schema(pg.dsn)
    other = await PostgresBackend.connect(pg.dsn, other_schema, max_size=2)
    try:
        async with backends[0].sweep_lock(PRUNE_LOCK) as got:
            assert got
            assert len(await _holders(conn, key)) == 1
            async with other.sweep_lock(PRUNE_LOCK) as elsewhere:
                assert elsewhere  # another schema's prune is another lock
        assert await _holders(conn, key) == []
    finally:
        await other.close()
        await drop_schema(pg.dsn, other_schema)


async def test_no_pooled_connection_keeps_the_lock_however_the_body_ends(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    key = PRUNE_LOCK_PREFIX + pg.schema
    for _ in range(3):  # the pool hands the same connections out again
        async with backends[0].sweep_lock(PRUNE_LOCK) as got:
            assert got
        assert await _holders(conn, key) == []
    with pytest.raises(RuntimeError):
        async with backends[0].sweep_lock(PRUNE_LOCK):
            raise RuntimeError("boom")
    assert await _holders(conn, key) == []
    inside = asyncio.Event()

    async def hold() -> None:
        async with backends[0].sweep_lock(PRUNE_LOCK) as got:
            assert got
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(hold())
    async with asyncio.timeout(10):
        await inside.wait()
    assert len(await _holders(conn, key)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Checked on the server: a lock left on a pooled session would look free to this same
    # backend (advisory locks are re-entrant per session) and held to every other.
    assert await _holders(conn, key) == []


async def test_the_lock_dies_with_the_session_that_held_it(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    first, second = backends
    key = PRUNE_LOCK_PREFIX + pg.schema
    killed = asyncio.Event()
    body_done = asyncio.Event()

    async def hold() -> None:
        async with first.sweep_lock(PRUNE_LOCK) as got:
            assert got
            [pid] = await _holders(conn, key)
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
            killed.set()
            await body_done.wait()

    holder = asyncio.create_task(hold())
    async with asyncio.timeout(10):
        await killed.wait()
        # The session is gone, so is its lock: the other instance gets it while the first
        # holder's body still runs.
        while await _holders(conn, key):
            await asyncio.sleep(0.05)
    async with second.sweep_lock(PRUNE_LOCK) as taken:
        assert taken
    body_done.set()
    await holder  # the dead connection's failed unlock does not raise out of the body
    async with first.sweep_lock(PRUNE_LOCK) as again:  # its pool replaced the connection
        assert again
