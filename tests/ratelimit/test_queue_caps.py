"""A queue's max_concurrent as a fleet-wide reservation: each job of a capped queue holds one
of the queue's slots while its body runs, besides the dispatch statement's cap (which only
pre-filters). Three workers on one PostgreSQL schema never run more of the queue at once than
its cap, by the jobs' own start and end on the database clock; a cap set while the workers run
is read at the next heartbeat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from taskq_core import RateLimitRegistry, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import Backend, EnqueueArgs
from taskq_core.clock import FakeClock
from taskq_core.ratelimit import queue_concurrency_reservation_name
from taskq_core.ratelimit.gate import Admission, Denial, RateLimiter
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.conftest import PgTarget, create_migrated_schema, drop_schema
from tests.worker.conftest import fast_settings

QUEUE = "capped"
CAP = 2
# The actor writes its start and end here (a table of the test's schema), on the server clock.
runs_pool: asyncpg.Pool | None = None
runs_table = ""
go = asyncio.Event()


@actor(queue=QUEUE)
async def slow(payload: dict[str, Any]) -> str:
    assert runs_pool is not None
    started = await runs_pool.fetchval("SELECT clock_timestamp()")
    await asyncio.sleep(0.2)  # long enough for the other workers' consumers to try beside it
    await runs_pool.execute(
        f"INSERT INTO {runs_table} (n, started, ended) VALUES ($1, $2, clock_timestamp())",
        payload["n"],
        started,
    )
    return "done"


bodies_waiting = 0  # bodies of ``waits`` that have begun and wait for ``go``


@actor(queue=QUEUE)
async def waits(payload: dict[str, Any]) -> str:
    global bodies_waiting
    bodies_waiting += 1
    await go.wait()
    return "done"


def worker(backend: Backend, *, until_idle: bool = True) -> Worker:
    return Worker(
        fast_settings(max_concurrency=4, queues=[QUEUE]),
        {ref.name: ref for ref in (slow, waits)},
        backend=backend,
        until_idle=until_idle,
        install_signal_handlers=False,
        rate_limits=RateLimitRegistry(),
    )


@pytest.fixture
async def pg(pg_server_dsn: str) -> AsyncIterator[PgTarget]:
    global runs_pool, runs_table, go, bodies_waiting
    go = asyncio.Event()  # one per test: an Event belongs to one event loop
    bodies_waiting = 0
    target = PgTarget(pg_server_dsn, await create_migrated_schema(pg_server_dsn))
    runs_table = f"{target.schema}.test_runs"
    runs_pool = await asyncpg.create_pool(target.dsn, min_size=1, max_size=8)
    await runs_pool.execute(
        f"CREATE TABLE {runs_table} (n int, started timestamptz, ended timestamptz)"
    )
    try:
        yield target
    finally:
        await runs_pool.close()
        runs_pool = None
        await drop_schema(target.dsn, target.schema)


async def _connect(pg: PgTarget) -> Backend:
    from taskq_core.backend.postgres.backend import PostgresBackend

    return await PostgresBackend.connect(pg.dsn, pg.schema)


async def test_three_workers_never_run_more_of_a_queue_at_once_than_its_cap(
    pg: PgTarget,
) -> None:
    backends = [await _connect(pg) for _ in range(3)]
    try:
        first = backends[0]
        await first.update_queue(QUEUE, max_concurrent=CAP)
        jobs = [await first.enqueue(EnqueueArgs("slow", {"n": n}, queue=QUEUE)) for n in range(12)]
        codes = await asyncio.wait_for(
            asyncio.gather(*(worker(b).run() for b in backends)), timeout=120
        )
        assert codes == [0, 0, 0]
        for job in jobs:
            row = await first.get(job.id)
            assert row is not None and row.status is JobStatus.SUCCEEDED
        assert runs_pool is not None
        runs = await runs_pool.fetch(f"SELECT n, started, ended FROM {runs_table}")
        # Every job ran its body once, and no moment saw more than CAP bodies running.
        assert sorted(r["n"] for r in runs) == list(range(12))
        edges = sorted(
            [(r["started"], 1) for r in runs] + [(r["ended"], -1) for r in runs],
            key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same instant
        )
        at_once = most = 0
        for _, step in edges:
            at_once += step
            most = max(most, at_once)
        assert most <= CAP
        assert await first.list_held_reservation_slots() == []  # every slot given back
        # The jobs went through the queue's reservation: its CAP slot rows exist.
        slot_rows = await runs_pool.fetchval(
            f"SELECT count(*) FROM {pg.schema}.reservation_slots WHERE name = $1",
            queue_concurrency_reservation_name(QUEUE),
        )
        assert slot_rows == CAP
    finally:
        for backend in backends:
            await backend.close()


async def test_a_cap_set_while_the_worker_runs_is_read_at_the_next_heartbeat(
    pg: PgTarget,
) -> None:
    backend = await _connect(pg)
    try:
        running = worker(backend, until_idle=False)
        run = asyncio.create_task(running.run())
        try:
            await backend.enqueue(EnqueueArgs("waits", {}, queue=QUEUE))
            name = queue_concurrency_reservation_name(QUEUE)
            await _until(lambda: running.deps is not None and running.deps.limiter is not None)
            # Its body runs, so it was admitted before the cap (a loaded run once set the cap
            # first: both jobs then held a slot).
            await _until(lambda: bodies_waiting == 1)
            assert running.deps is not None and running.deps.limiter is not None
            limiter = running.deps.limiter
            assert limiter.queue_caps == {}  # no cap yet: the job holds no queue slot
            # The first job runs on without a slot (admitted before the cap): a cap of 2 lets
            # the dispatch statement pass a second, which holds one of the queue's slots.
            await backend.update_queue(QUEUE, max_concurrent=2)
            await _until(lambda: limiter.queue_caps == {QUEUE: 2})
            await backend.enqueue(EnqueueArgs("waits", {}, queue=QUEUE))

            async def one_queue_slot_held() -> bool:
                return len(await backend.list_held_reservation_slots(name)) == 1

            await _until_async(one_queue_slot_held)
            await backend.update_queue(QUEUE, max_concurrent=None)
            await _until(lambda: limiter.queue_caps == {})
        finally:
            go.set()
            running.stop()
            await asyncio.wait_for(run, 30)
        assert await backend.list_held_reservation_slots() == []
    finally:
        await backend.close()


async def test_the_queue_reservation_denies_past_the_cap_and_follows_its_changes() -> None:
    # The strict guard itself, apart from the dispatch statement: two limiters (two workers)
    # on one store admit at most the cap's jobs of the queue; a raised cap admits more.
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    fleet = [
        RateLimiter({}, store, store, clock=clock, lease=timedelta(minutes=1)) for _ in range(2)
    ]
    for limiter in fleet:
        limiter.set_queue_caps({QUEUE: CAP})
    assert fleet[0].applies("slow", QUEUE) and not fleet[0].applies("slow", "other")
    jobs = [uuid4() for _ in range(3)]
    verdicts = [
        await fleet[n % 2].admit("slow", {}, job, uuid4(), QUEUE) for n, job in enumerate(jobs)
    ]
    assert [isinstance(v, Admission) for v in verdicts] == [True, True, False]
    denial = verdicts[2]
    assert isinstance(denial, Denial)
    assert denial.reason == f"reservation:{queue_concurrency_reservation_name(QUEUE)}"
    assert await fleet[0].admit("slow", {}, uuid4(), uuid4(), "other") == Admission()
    for limiter in fleet:
        limiter.set_queue_caps({QUEUE: CAP + 1})
    assert isinstance(await fleet[1].admit("slow", {}, jobs[2], uuid4(), QUEUE), Admission)
    await store.close()


async def _until(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def _until_async(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)
