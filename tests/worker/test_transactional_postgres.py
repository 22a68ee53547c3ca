"""``ctx.connection()`` on PostgreSQL: an actor's writes commit with its job's success, and
only then (failure, or a lease lost to a reclaim, rolls them back)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

wrote = asyncio.Event()
may_return = asyncio.Event()


@actor(queue="ledger", retry=RetryPolicy(kind="non_retryable"))  # a failure fails at once
async def record(payload: dict[str, Any], ctx: JobContext[Any]) -> str:
    conn = await ctx.connection()
    await conn.execute(f"INSERT INTO {payload['schema']}.effects (job_id) VALUES ($1)", ctx.job_id)
    wrote.set()
    if payload.get("wait"):
        await may_return.wait()
    if payload.get("fail"):
        raise RuntimeError("failed after writing")
    return "recorded"


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(f"CREATE TABLE {pg.schema}.effects (job_id uuid NOT NULL)")
    finally:
        await conn.close()
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    wrote.clear()
    may_return.clear()
    yield db
    may_return.set()
    await db.close()


async def effects(pg: PgTarget) -> int:
    conn = await asyncpg.connect(pg.dsn)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.effects"))
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("fail", "status", "count"), [(False, "succeeded", 1), (True, "failed", 0)]
)
async def test_the_actors_writes_commit_only_with_the_jobs_success(
    pg: PgTarget,
    backend: PostgresBackend,
    make_worker: Callable[..., Worker],
    fail: bool,
    status: str,
    count: int,
) -> None:
    payload = {"schema": pg.schema, "fail": fail}
    row = await backend.enqueue(
        EnqueueArgs("record", payload, queue="ledger", retry_kind="non_retryable")
    )
    worker = make_worker(backend, [record], queues=["ledger"])
    await asyncio.wait_for(worker.run(), 30)
    job = await backend.get(row.id)
    assert job is not None and job.status.value == status
    assert await effects(pg) == count


async def test_a_lease_lost_while_the_actor_runs_rolls_its_writes_back(
    pg: PgTarget, backend: PostgresBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(
        EnqueueArgs("record", {"schema": pg.schema, "wait": True}, queue="ledger")
    )
    worker = make_worker(backend, [record], until_idle=False, queues=["ledger"])
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(wrote.wait(), 10)
    # The leader of another fleet reclaims the job: its lease has run out (as after a partition).
    await backend.update_queue("ledger", paused=True)
    # The worker's heartbeat may renew the lease between the expiry and the reclaim (it runs
    # every fraction of a second here): expire it again until the reclaim finds it expired.
    conn = await asyncpg.connect(pg.dsn)
    try:
        for _ in range(50):
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET lock_expires_at = now() - interval '1 hour' "
                "WHERE id = $1",
                row.id,
            )
            if await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1:
                break
        else:
            pytest.fail("the heartbeat renewed the lease before every reclaim")
    finally:
        await conn.close()
    may_return.set()
    async with asyncio.timeout(10):
        while worker.deps is None or worker.deps.active.get(row.id) is not None:
            await asyncio.sleep(0.02)
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.PENDING
    assert await effects(pg) == 0, "the write of an attempt that lost its lease must roll back"
    worker.stop()
    assert await asyncio.wait_for(run, 20) == 0
