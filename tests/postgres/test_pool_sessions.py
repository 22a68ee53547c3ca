"""Pool connections skip asyncpg's reset query, so session state must never leak between uses.

TaskQ's own statements leave no session state; the one connection user code gets,
``PostgresBackend.transaction()``'s, is fully reset when the caller is done with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def one_connection(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    """A backend whose pool holds a single connection: every use reuses the same session."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, min_size=1, max_size=1)
    yield backend
    await backend.close()


async def test_session_state_set_in_a_lent_transaction_does_not_outlive_it(
    one_connection: PostgresBackend,
) -> None:
    async with one_connection.transaction() as conn:
        await conn.execute("SET statement_timeout = '123s'")  # any value but the default
        await conn.execute("SELECT pg_advisory_lock(4242)")
        await conn.execute("LISTEN user_channel")

    async with one_connection.transaction() as conn:
        assert await conn.fetchval("SHOW statement_timeout") == "0"
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        assert held == 0
        assert await conn.fetchval("SELECT count(*) FROM pg_listening_channels()") == 0
    # TaskQ's own settings (connection start-up parameters) are what RESET ALL restores.
    async with one_connection.transaction() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"


async def test_a_failed_lent_transaction_leaves_a_usable_pool(
    one_connection: PostgresBackend,
) -> None:
    with pytest.raises(RuntimeError):
        async with one_connection.transaction() as conn:
            await conn.execute("SET work_mem = '64kB'")
            raise RuntimeError("caller's failure")

    job = await one_connection.enqueue(EnqueueArgs(actor="a", payload={}))
    assert (await one_connection.get(job.id)) == job
    async with one_connection.transaction() as conn:
        assert await conn.fetchval("SHOW work_mem") != "64kB"


async def test_dispatch_commits_asynchronously_only_for_itself(
    one_connection: PostgresBackend, pg: PgTarget
) -> None:
    """The claim turns synchronous_commit off for its own transaction, never for the session."""
    await one_connection.enqueue(EnqueueArgs(actor="a", payload={}))
    dispatch = one_connection._queries["dispatch_batch"]
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute("SET synchronous_commit = 'on'")  # the test server's default is off
        async with conn.transaction():
            claimed = await conn.fetch(dispatch, ["default"], 1, uuid4(), timedelta(minutes=1), 2)
            assert len(claimed) == 1
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
    finally:
        await conn.close()
