"""Fixtures of the end-to-end tests that need a PostgreSQL server of their own."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from chaos.pgserver import PrivateServer
from taskq_core.backend.postgres.migrate import migrate_up

# The schema the private server is migrated into.
PRIVATE_SCHEMA = "taskq"


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    """A PostgreSQL server of this test's own (to restart or stop for real), migrated. Its
    directory is not under pytest's tmp_path: pytest makes that tree private to root, which
    the server's user cannot cross."""
    own = PrivateServer(Path(tempfile.mkdtemp(prefix="taskq-own-server-")) / "pg")
    own.start()
    own.tune_for_tests()

    async def migrate() -> None:
        conn = await asyncpg.connect(own.dsn)
        try:
            await migrate_up(conn, PRIVATE_SCHEMA)
        finally:
            await conn.close()

    asyncio.run(migrate())
    try:
        yield own
    finally:
        own.close()
