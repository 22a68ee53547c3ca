"""Scheduled jobs are promoted when they are due, not at the next interval: the leader waits
for the earliest scheduled job it read, and for an earlier one announced as it is enqueued
or as a settle reschedules it (a retry's backoff).
The interval here is a minute, so only the timed wake-up can run the jobs within the test's
bounds. A real worker on both backends; the backends' announcement and next-due read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

MINUTE = 60.0
_ran: list[asyncio.Queue[str]] = []  # one per test (a queue belongs to its event loop)


@actor
async def remind(payload: dict[str, str]) -> None:
    _ran[0].put_nowait(payload["what"])


@actor(retry=RetryPolicy(max_attempts=3, base=timedelta(milliseconds=300), jitter=0))
async def flaky(payload: dict[str, str], ctx: JobContext[dict[str, str]]) -> None:
    _ran[0].put_nowait(f"attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        _ran[:] = [asyncio.Queue()]
        yield opened


async def test_the_next_due_time_is_read_on_the_backends_clock(backend: Backend) -> None:
    assert await backend.get_next_due_in() is None
    await backend.enqueue(EnqueueArgs("remind", {}, delay=timedelta(minutes=10)))
    await backend.enqueue(EnqueueArgs("remind", {}))  # pending: not waiting for a time
    due_in = await backend.get_next_due_in()
    assert due_in is not None and 9 * MINUTE < due_in <= 10 * MINUTE


async def test_jobs_that_wait_for_a_time_are_announced_as_they_are_enqueued(
    backend: Backend,
) -> None:
    async with backend.subscribe_scheduled() as heard, JobsClient(backend=backend) as client:
        await client.enqueue(remind, {"what": "now"})
        await client.enqueue_batch(
            [EnqueueItem(remind, {"what": "later"}, delay=10 * MINUTE),
             EnqueueItem(remind, {"what": "soon"}, delay=5 * MINUTE)]
        )  # fmt: skip
        await asyncio.wait_for(heard.event.wait(), 10)
        soon = heard.take()
        await client.enqueue(remind, {"what": "single"}, delay=7 * MINUTE)
        await asyncio.wait_for(heard.event.wait(), 10)
        single = heard.take()
    assert soon is not None and single is not None
    # Heard as monotonic due times: the batch's earliest (5 min), then the single (7 min).
    assert 1.5 * MINUTE < single - soon < 2.5 * MINUTE


async def test_a_job_due_soon_runs_on_time_though_the_interval_is_a_minute(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(backend, [remind], until_idle=False, scheduled_wake_interval=MINUTE)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 30)
        async with JobsClient(backend=backend) as client:
            far = await client.enqueue(remind, {"what": "far"}, delay=50)  # the leader's plan
            await _leading(worker)
            await client.enqueue(remind, {"what": "soon"}, delay=0.3)  # earlier: announced
            assert await asyncio.wait_for(_ran[0].get(), 30) == "soon"
            row = await client.get(far.id)
            assert row is not None and row.status is JobStatus.SCHEDULED
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)


async def test_a_retry_due_soon_runs_on_time_though_the_interval_is_a_minute(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    # The settle that schedules the retry (0.3 s backoff) announces it: without that, the
    # leader would sleep until the far job is due (50 s), past the test's bound.
    worker = make_worker(backend, [remind, flaky], until_idle=False, scheduled_wake_interval=MINUTE)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 30)
        async with JobsClient(backend=backend) as client:
            await client.enqueue(remind, {"what": "far"}, delay=50)  # the leader's plan
            await _leading(worker)
            job = await client.enqueue(flaky, {})
            assert await asyncio.wait_for(_ran[0].get(), 30) == "attempt 1"
            assert await asyncio.wait_for(_ran[0].get(), 30) == "attempt 2"
            row = await client.wait(job.id, timeout=30)
            assert row.status is JobStatus.SUCCEEDED
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)


async def _leading(worker: Worker) -> None:
    deps: Any = worker.deps
    await asyncio.wait_for(deps.state.is_leader.wait(), 30)
