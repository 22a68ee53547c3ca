"""JobsClient.enqueue through a real PostgreSQL outage, on a server of the test's own.

An application's feeder must not die when the database restarts: an enqueue made while the
server is down waits for it (within ``enqueue_retry_timeout``) and then makes exactly one
job; past the bound it raises the database's error and makes none. The server is stopped
and started for real, never the shared one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import structlog

from chaos.pgserver import PrivateServer
from taskq_core.client import JobsClient
from taskq_core.errors import DatabaseUnavailableError
from tests.e2e.conftest import PRIVATE_SCHEMA

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

SCHEMA = PRIVATE_SCHEMA


async def stored_jobs(dsn: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(f"SELECT id, actor, payload::text FROM {SCHEMA}.jobs ORDER BY id")
    finally:
        await conn.close()
    return [tuple(row) for row in rows]


async def until(check: Callable[[], Awaitable[bool] | bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.05)


async def test_an_enqueue_while_the_server_is_down_waits_for_it_and_makes_one_job(
    server: PrivateServer,
) -> None:
    async with JobsClient(server.dsn, schema=SCHEMA, enqueue_retry_timeout=120) as client:
        first = await client.enqueue("feed", {"n": 1})  # the pool is open and warm
        with structlog.testing.capture_logs() as logs:
            await asyncio.to_thread(server.stop, "fast")
            pending = asyncio.create_task(client.enqueue("feed", {"n": 2}))
            # It has met the outage at least twice and is still waiting, not dead.
            await until(
                lambda: sum(log["event"] == "client_call_retrying" for log in logs) >= 2, 60
            )
            assert not pending.done()
            await asyncio.to_thread(server.start)
            second = await asyncio.wait_for(pending, 120)
    assert await stored_jobs(server.dsn) == [
        (first.id, "feed", '{"n": 1}'),
        (second.id, "feed", '{"n": 2}'),
    ]
    assert any(log["event"] == "client_call_recovered" for log in logs)


async def test_an_enqueue_past_its_retry_bound_raises_and_makes_no_job(
    server: PrivateServer,
) -> None:
    async with JobsClient(server.dsn, schema=SCHEMA, enqueue_retry_timeout=1) as client:
        await client.enqueue("feed", {"n": 1})
        await asyncio.to_thread(server.stop, "fast")
        with pytest.raises(DatabaseUnavailableError, match="PostgreSQL is unavailable"):
            await client.enqueue("feed", {"n": 2})
        await asyncio.to_thread(server.start)
        after = await client.enqueue("feed", {"n": 3})  # the same client carries on
    assert [row[2] for row in await stored_jobs(server.dsn)] == ['{"n": 1}', '{"n": 3}']
    assert after.payload == {"n": 3}
