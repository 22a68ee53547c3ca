"""The enqueue statement's idempotency on the id where only PostgreSQL can show it: a repeat
that waits on the first insert's uncommitted row, and the wake-up a repeat does not send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow
from taskq_core.ids import uuid7
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield opened
    await opened.close()


async def waiting_on_a_lock(pg: PgTarget) -> bool:
    conn = await asyncpg.connect(pg.dsn)
    try:
        waiting: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database() "
            "AND query LIKE '%INSERT INTO ' || $1 || '.jobs%'",
            pg.schema,
        )
    finally:
        await conn.close()
    return waiting > 0


async def test_a_repeat_that_waited_on_the_first_insert_returns_it_once_committed(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    # The first attempt's transaction is still open when the retry arrives: the retry's
    # insert waits on the row, then finds it (in a fresh snapshot) once it commits.
    args = EnqueueArgs("work", {"n": 1}, job_id=uuid7())
    async with backend.transaction() as tx:
        first = await backend.enqueue(args, connection=tx)
        repeat = asyncio.create_task(backend.enqueue(args))
        async with asyncio.timeout(30):
            while not await waiting_on_a_lock(pg):
                assert not repeat.done(), repeat
                await asyncio.sleep(0.05)
    second = await asyncio.wait_for(repeat, 30)
    assert second == first
    assert await backend.list_jobs(JobFilter(limit=None)) == [first]


async def test_a_repeat_whose_first_insert_rolled_back_inserts_the_job(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    args = EnqueueArgs("work", {"n": 1}, job_id=uuid7())

    class Abort(Exception):
        pass

    repeat: asyncio.Task[JobRow] | None = None
    with pytest.raises(Abort):
        async with backend.transaction() as tx:
            await backend.enqueue(args, connection=tx)
            repeat = asyncio.create_task(backend.enqueue(args))
            async with asyncio.timeout(30):
                while not await waiting_on_a_lock(pg):
                    await asyncio.sleep(0.05)
            raise Abort
    assert repeat is not None
    second = await asyncio.wait_for(repeat, 30)
    assert [job.id for job in await backend.list_jobs(JobFilter(limit=None))] == [second.id]
    assert second.id == args.job_id
