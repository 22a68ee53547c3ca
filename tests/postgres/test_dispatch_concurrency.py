"""Dispatch under real concurrency: separate backend instances, separate connections.

What only a real database can show: SKIP LOCKED never hands a job out twice, the max_concurrent
over-count stays within its documented bound, COPY inserts, a NOTIFY crosses processes'
connections, and an enqueue on the caller's own connection commits or rolls back with it.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

LEASE = timedelta(minutes=5)
SEED = 20261129


@pytest.fixture
async def backends(pg: PgTarget) -> AsyncIterator[list[PostgresBackend]]:
    """Four backend instances on the same schema, each with its own pool."""
    opened = [await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3) for _ in range(4)]
    yield opened
    for backend in opened:
        await backend.close()


async def test_concurrent_dispatchers_never_hand_out_a_job_twice(
    backends: list[PostgresBackend],
) -> None:
    rng = random.Random(SEED)
    producer = backends[0]
    await producer.update_queue("fair", mode="round_robin")
    queues = ["alpha", "beta", "fair"]
    items = [
        EnqueueArgs(
            actor=rng.choice(["resize", "email", "report"]),
            queue=rng.choice(queues),
            priority=rng.randint(-5, 5),
            fairness_key=rng.choice([None, "t1", "t2", "t3"]),
            payload={"n": n},
        )
        for n in range(3000)
    ]
    for start in range(0, len(items), 500):
        await producer.enqueue_batch_fast(items[start : start + 500])

    claimed: list[list[UUID]] = [[] for _ in backends]

    async def drain(index: int, backend: PostgresBackend) -> None:
        worker, local = uuid4(), random.Random(SEED + index)
        empty_rounds = 0
        while empty_rounds < 3:
            rows = await backend.dispatch_batch(
                worker, local.sample(queues, k=local.randint(1, 3)), local.randint(1, 40), LEASE
            )
            empty_rounds = 0 if rows else empty_rounds + 1
            claimed[index].extend(row.id for row in rows)
            for row in rows:
                assert row.locked_by_worker == worker and row.status is JobStatus.RUNNING
                if local.random() < 0.5:
                    assert await backend.mark_succeeded(row.lease(), None)

    await asyncio.gather(*(drain(i, backend) for i, backend in enumerate(backends)))
    everything = [job_id for ids in claimed for job_id in ids]
    duplicates = [job_id for job_id, n in Counter(everything).items() if n > 1]
    assert duplicates == []
    assert len(everything) == len(items)
    assert sum(1 for ids in claimed if ids) > 1  # the work really was shared
    assert await producer.count_jobs(JobFilter(active=True, limit=None)) == len(
        await producer.list_jobs(JobFilter(status="running", limit=None))
    )
    for row in await producer.list_jobs(JobFilter(limit=None)):
        assert row.attempt == 1


async def test_the_actor_cap_over_count_is_bounded_by_the_other_dispatchers(
    backends: list[PostgresBackend],
) -> None:
    cap, dispatchers = 3, backends[:2]
    producer = backends[0]
    await producer.sync_actor_configs(
        [ActorDeclaration("capped", "default", {}, cap, None, None)], force=False
    )
    await producer.enqueue_batch_fast([EnqueueArgs("capped", {"n": n}) for n in range(120)])
    rng = random.Random(SEED)
    workers = [uuid4() for _ in dispatchers]
    peak = 0
    for _ in range(200):
        await asyncio.gather(
            *(
                backend.dispatch_batch(worker, ["default"], 10, LEASE)
                for backend, worker in zip(dispatchers, workers, strict=True)
            )
        )
        running = await producer.list_jobs(JobFilter(status="running", limit=None))
        peak = max(peak, len(running))
        assert len(running) <= cap + (len(dispatchers) - 1) * cap
        for row in running:
            if rng.random() < 0.6:
                assert row.locked_by_worker in workers
                await producer.mark_succeeded(row.lease(), None)
        if await producer.count_jobs(JobFilter(queue="default", active=True, limit=None)) == 0:
            break
    assert await producer.count_jobs(JobFilter(queue="default", active=True, limit=None)) == 0
    assert peak >= cap


async def test_a_dispatcher_skips_rows_another_transaction_holds_and_still_fills_its_batch(
    backends: list[PostgresBackend], pg: PgTarget
) -> None:
    backend = backends[0]
    jobs = await backend.enqueue_batch([EnqueueArgs("work", {"n": n}) for n in range(4)])
    holder = await asyncpg.connect(pg.dsn)
    try:
        async with holder.transaction():
            await holder.execute(
                f"SELECT id FROM {pg.schema}.jobs WHERE id = $1 FOR UPDATE", jobs[0].id
            )
            claimed = await backend.dispatch_batch(uuid4(), ["default"], 2, LEASE)
            assert [row.id for row in claimed] == [jobs[1].id, jobs[2].id]
    finally:
        await holder.close()
    [head] = await backend.dispatch_batch(uuid4(), ["default"], 1, LEASE)
    assert head.id == jobs[0].id


async def test_the_copy_path_inserts_thousands_of_jobs(backends: list[PostgresBackend]) -> None:
    backend = backends[0]
    count = await backend.enqueue_batch_fast(
        [EnqueueArgs("bulk", {"n": n}, queue="bulk", priority=n % 7) for n in range(5000)]
    )
    assert count == 5000
    assert await backend.count_jobs(JobFilter(queue="bulk", active=True, limit=None)) == 5000
    first = await backend.dispatch_batch(uuid4(), ["bulk"], 3, LEASE)
    assert [row.priority for row in first] == [6, 6, 6]
    assert [row.payload["n"] for row in first] == [6, 13, 20]


async def test_a_notify_from_another_backend_instance_wakes_a_subscriber(
    backends: list[PostgresBackend],
) -> None:
    listener, producer = backends[0], backends[1]
    async with listener.subscribe_wake() as woken, listener.subscribe_cancel_wake() as cancel:
        await producer.enqueue(EnqueueArgs("ping"))
        async with asyncio.timeout(5):
            await woken.wait()
        [job] = await producer.dispatch_batch(uuid4(), ["default"], 1, LEASE)
        assert not cancel.is_set()
        assert await producer.write_cancel_request(job.id, "stop") == "requested"
        async with asyncio.timeout(5):
            await cancel.wait()


@pytest.fixture
async def caller_connection(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    """The application's own connection, with a jsonb codec of its own (text format)."""
    conn = await asyncpg.connect(pg.dsn)
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog", format="text"
    )
    yield conn
    await conn.close()


async def test_enqueue_on_a_caller_owned_connection_rolls_back_with_it(
    backends: list[PostgresBackend], caller_connection: asyncpg.Connection
) -> None:
    backend = backends[0]
    with pytest.raises(RuntimeError):
        async with caller_connection.transaction():
            await backend.enqueue(EnqueueArgs("tx", {"n": 1}), connection=caller_connection)
            await backend.enqueue_batch([EnqueueArgs("tx")], connection=caller_connection)
            await backend.enqueue_batch_fast([EnqueueArgs("tx")], connection=caller_connection)
            raise RuntimeError("the application's own work failed")
    assert await backend.list_jobs(JobFilter()) == []


async def test_enqueue_on_a_caller_owned_connection_commits_with_it(
    backends: list[PostgresBackend], caller_connection: asyncpg.Connection
) -> None:
    backend = backends[0]
    payload = {"text": "tab\there\nline \\ back", "nested": [1, {"k": None}]}
    async with caller_connection.transaction():
        job = await backend.enqueue(EnqueueArgs("tx", payload), connection=caller_connection)
        [batch] = await backend.enqueue_batch(
            [EnqueueArgs("tx", payload)], connection=caller_connection
        )
        count = await backend.enqueue_batch_fast(
            [EnqueueArgs("fast", payload, metadata={"m": 1}, delay=timedelta(minutes=1))],
            connection=caller_connection,
        )
        assert await backend.get(job.id) is None  # not committed yet
    assert count == 1
    assert job.payload == payload and batch.payload == payload
    stored = await backend.list_jobs(JobFilter(limit=None))
    assert len(stored) == 3
    assert all(row.payload == payload for row in stored)
    [fast] = [row for row in stored if row.actor == "fast"]
    assert (fast.status, fast.metadata) == (JobStatus.SCHEDULED, {"m": 1})
    # Autocommit on a connection outside any transaction works too.
    alone = await backend.enqueue(EnqueueArgs("tx"), connection=caller_connection)
    assert await backend.get(alone.id) == alone
