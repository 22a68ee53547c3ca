"""A worker's connections: pools by role, a command timeout on every statement, keepalives."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from types import SimpleNamespace
from uuid import uuid4

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    enable_keepalive,
)
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.errors import DatabaseUnavailableError
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres
LEASE = timedelta(seconds=30)


async def test_heartbeat_and_dispatch_do_not_wait_behind_a_busy_general_pool(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(
        pg.dsn, pg.schema, min_size=1, max_size=1, dispatch_pool_size=1, heartbeat_pool_size=1
    )
    try:
        await backend.enqueue(EnqueueArgs("work"))
        worker = uuid4()
        async with backend.transaction():  # holds the general pool's only connection
            result = await asyncio.wait_for(backend.heartbeat(worker, LEASE, []), 5)
            claimed = await asyncio.wait_for(
                backend.dispatch_batch(worker, ["default"], 1, LEASE), 5
            )
        assert result.held == frozenset() and len(claimed) == 1
    finally:
        await backend.close()


async def test_a_statement_past_the_command_timeout_is_cut_off(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, command_timeout=0.2)
    try:
        async with backend.transaction() as conn:
            with pytest.raises(TimeoutError):
                await conn.execute("SELECT pg_sleep(5)")
    finally:
        await backend.close()


async def test_the_backend_reports_a_hung_statement_as_the_database_being_away(
    pg: PgTarget,
) -> None:
    """A lock held elsewhere hangs the dispatch; the timeout turns it into an outage error."""
    import asyncpg

    backend = await PostgresBackend.connect(pg.dsn, pg.schema, command_timeout=0.3)
    blocker = await asyncpg.connect(pg.dsn)
    try:
        await blocker.execute("BEGIN")
        await blocker.execute(f"LOCK TABLE {pg.schema}.jobs IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(DatabaseUnavailableError):
            await backend.dispatch_batch(uuid4(), ["default"], 1, LEASE)
    finally:
        await blocker.close()
        await backend.close()


def test_keepalives_are_switched_on_for_tcp_connections() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        conn = SimpleNamespace(_transport=SimpleNamespace(get_extra_info=lambda _: sock))
        enable_keepalive(conn)  # type: ignore[arg-type]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_COUNT
