"""Unique keys where only PostgreSQL can show it: racing enqueues from many connections, an
enqueue that waits on an uncommitted holder, and windows on the server's own clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow
from taskq_core.backend.protocol.unique import windowed_key
from taskq_core.errors import SingletonCollisionError
from tests.conftest import PgTarget
from tests.postgres.test_enqueue_idempotent import waiting_on_a_lock
from tests.postgres.test_retention_postgres import generic_plan, scan_names

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

RACERS = 20


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield opened
    await opened.close()


async def all_jobs(backend: PostgresBackend) -> list[JobRow]:
    return await backend.list_jobs(JobFilter(limit=None))


@pytest.mark.parametrize("unique_for", [None, timedelta(days=30)])
async def test_racing_enqueues_of_one_key_from_many_connections_make_one_job(
    backend: PostgresBackend, pg: PgTarget, unique_for: timedelta | None
) -> None:
    connections = [await asyncpg.connect(pg.dsn) for _ in range(RACERS)]
    try:
        start = asyncio.Event()

        async def racer(conn: asyncpg.Connection, n: int) -> JobRow | SingletonCollisionError:
            await start.wait()
            item = EnqueueArgs("work", {"n": n}, unique_key="nightly", unique_for=unique_for)
            try:
                return await backend.enqueue(item, connection=conn)
            except SingletonCollisionError as exc:
                return exc

        racers = [asyncio.create_task(racer(c, n)) for n, c in enumerate(connections)]
        await asyncio.sleep(0)  # every racer is waiting on the start line
        start.set()
        outcomes = await asyncio.gather(*racers)
    finally:
        await asyncio.gather(*(conn.close() for conn in connections))

    stored = await all_jobs(backend)
    assert len(stored) == 1
    [winner] = [o for o in outcomes if isinstance(o, JobRow)]
    assert winner == stored[0]
    errors = [o for o in outcomes if isinstance(o, SingletonCollisionError)]
    assert len(errors) == RACERS - 1
    assert {(e.unique_key, e.existing_job_id) for e in errors} == {("nightly", winner.id)}


async def test_an_enqueue_waiting_on_an_uncommitted_holder_is_refused_once_it_commits(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    async with backend.transaction() as tx:
        holder = await backend.enqueue(EnqueueArgs("work", unique_key="k"), connection=tx)
        second = asyncio.create_task(backend.enqueue(EnqueueArgs("work", unique_key="k")))
        async with asyncio.timeout(30):
            while not await waiting_on_a_lock(pg):
                assert not second.done(), second
                await asyncio.sleep(0.05)
    # The holder committed while the second insert waited: not in that statement's snapshot,
    # found by the statement's second run.
    with pytest.raises(SingletonCollisionError) as info:
        await asyncio.wait_for(second, 30)
    assert info.value.existing_job_id == holder.id
    assert [job.id for job in await all_jobs(backend)] == [holder.id]


async def test_an_enqueue_waiting_on_a_holder_that_rolls_back_inserts_its_job(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    class Abort(Exception):
        pass

    second: asyncio.Task[JobRow] | None = None
    with pytest.raises(Abort):
        async with backend.transaction() as tx:
            await backend.enqueue(EnqueueArgs("work", unique_key="k"), connection=tx)
            second = asyncio.create_task(backend.enqueue(EnqueueArgs("work", unique_key="k")))
            async with asyncio.timeout(30):
                while not await waiting_on_a_lock(pg):
                    await asyncio.sleep(0.05)
            raise Abort
    assert second is not None
    job = await asyncio.wait_for(second, 30)
    assert [row.id for row in await all_jobs(backend)] == [job.id]


async def test_a_batch_refused_by_a_stored_key_leaves_the_callers_transaction_usable(
    backend: PostgresBackend,
) -> None:
    holder = await backend.enqueue(EnqueueArgs("work", unique_key="k"))
    async with backend.transaction() as tx:
        before = await backend.enqueue(EnqueueArgs("work", {"n": 1}), connection=tx)
        with pytest.raises(SingletonCollisionError) as info:
            await backend.enqueue_batch(
                [EnqueueArgs("work"), EnqueueArgs("work", unique_key="k")], connection=tx
            )
        after = await backend.enqueue(EnqueueArgs("work", {"n": 2}), connection=tx)
    assert info.value.existing_job_id == holder.id
    assert {job.id for job in await all_jobs(backend)} == {holder.id, before.id, after.id}


async def test_the_next_window_on_the_servers_clock_frees_the_key(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    # One-second windows on the real clock: the second try waits (on the database's clock,
    # not a sleep of a guessed length) until the first job's window has ended.
    width = timedelta(seconds=1)
    first = await backend.enqueue(EnqueueArgs("work", unique_key="tick", unique_for=width))
    assert first.unique_until is not None
    conn = await asyncpg.connect(pg.dsn)
    try:
        async with asyncio.timeout(10):
            while await conn.fetchval("SELECT clock_timestamp()") < first.unique_until:
                await asyncio.sleep(0.05)
    finally:
        await conn.close()

    second = await backend.enqueue(EnqueueArgs("work", unique_key="tick", unique_for=width))

    assert second.unique_until is not None
    assert second.unique_until >= first.unique_until + width
    assert second.unique_key == windowed_key("tick", second.unique_until - width)
    assert second.unique_key != first.unique_key


# --- plans -------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_the_holder_of_a_key_is_found_on_the_unique_index_of_a_big_table(
    pg: PgTarget,
) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"""INSERT INTO {pg.schema}.jobs (id, actor, queue, status, unique_key)
                SELECT gen_random_uuid(), 'work', 'default',
                       (ARRAY['pending','succeeded'])[1 + n % 2]::{pg.schema}.job_status,
                       CASE WHEN n % 3 = 0 THEN 'k' || n END
                FROM generate_series(1, 60000) AS n"""
        )
        await conn.execute(f"ANALYZE {pg.schema}.jobs")
        # A refused enqueue (the key of a pending job) and the batch's holder lookup.
        enqueue = await generic_plan(
            conn,
            render("enqueue", pg.schema),
            args="gen_random_uuid(), 'work', 'default', '{}', 0, NULL, NULL, NULL, NULL, "
            "'transient', 3, NULL, '{}', NULL, NULL, 'wake', 'k6', NULL, NULL, "
            "'events'",
            analyze=True,
        )
        holder = await generic_plan(
            conn, render("unique_holder", pg.schema), args="ARRAY['k6', 'k9']", analyze=True
        )
    finally:
        await conn.close()
    for plan in (enqueue, holder):
        names = scan_names(plan)
        assert "Index Scan jobs_unique_key_idx" in names, names
        assert not any(name.startswith("Seq Scan") for name in names), names
