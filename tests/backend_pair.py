"""One backend of each kind for the tests that run a case on both: an InMemoryBackend, or a
PostgresBackend on a freshly migrated schema of the test server (dropped afterwards)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from taskq_core.backend.protocol import Backend
from tests.conftest import PgTarget
from tests.schema_pool import give_back, take_schema

KINDS = ["memory", "postgres"]


@asynccontextmanager
async def open_backend(kind: str, server_dsn: str) -> AsyncIterator[Backend]:
    """A backend of ``kind`` ("memory" or "postgres"), closed on exit."""
    if kind == "memory":
        from taskq_core.backend.memory import InMemoryBackend

        memory = InMemoryBackend()
        try:
            yield memory
        finally:
            await memory.close()
        return
    from taskq_core.backend.postgres.backend import PostgresBackend

    pg = PgTarget(server_dsn, await take_schema(server_dsn))
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        yield db
    finally:
        await db.close()
        await give_back(pg.dsn, pg.schema)
