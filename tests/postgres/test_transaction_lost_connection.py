"""``backend.transaction()`` when its connection dies (a failover, a restart): leaving it raises
TaskQ's DatabaseUnavailableError, or the body's own error, never asyncpg's InterfaceError
about a closed connection (which crashed a worker's consumer mid-failover)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.errors import DatabaseUnavailableError
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    yield db
    await db.close()


async def _kill(pg: PgTarget, lent: Any) -> None:
    """End ``lent``'s server session and wait until the client has seen it go."""
    pid = await lent.fetchval("SELECT pg_backend_pid()")
    conn = await asyncpg.connect(pg.dsn)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()
    async with asyncio.timeout(10):
        while not _closed(lent):
            await asyncio.sleep(0.01)


def _closed(lent: Any) -> bool:
    try:
        return bool(lent.is_closed())
    except asyncpg.InterfaceError:  # the pool already took the dead connection back
        return True


async def test_a_body_that_lost_its_connection_raises_its_own_error(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    class BodyError(Exception):
        pass

    with pytest.raises(BodyError):
        async with backend.transaction() as conn:
            await _kill(pg, conn)
            raise BodyError("the body saw the connection go")
    assert await backend.has_active_jobs(["default"]) is False  # the pool serves on


async def test_a_commit_on_a_lost_connection_is_database_unavailable(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    with pytest.raises(DatabaseUnavailableError):
        async with backend.transaction() as conn:
            await _kill(pg, conn)
    assert await backend.has_active_jobs(["default"]) is False
