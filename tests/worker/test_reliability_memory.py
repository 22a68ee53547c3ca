"""The worker's reliability rules, in-process on the memory backend: unstorable results,
transactional completion, cancels that win, forced shutdowns and threads that cannot stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.cancel import THREAD_ABANDONED
from taskq_core.worker.runtime import Worker

release_thread = threading.Event()


@actor
async def returns_nan(payload: dict[str, Any]) -> float:
    return float("nan")


@actor
async def returns_nul(payload: dict[str, Any]) -> dict[str, str]:
    return {"text": "a\x00b"}


@actor(retry=RetryPolicy(kind="non_retryable"))  # the worker follows its actor's policy
async def writes_in_its_transaction(payload: dict[str, Any], ctx: JobContext[Any]) -> str:
    conn = await ctx.connection()  # memory: a transaction handle of the worker's backend
    effect = EnqueueArgs("side_effect", {"of": str(ctx.job_id)}, queue="effects")
    await conn.backend.enqueue(effect, connection=conn)
    if payload.get("fail"):
        raise RuntimeError("after the write")
    return "wrote"


@actor
def stuck_thread(payload: dict[str, Any]) -> str:
    release_thread.wait(30)  # ignores every cancel: a thread cannot be interrupted
    return "finally"


let_go = threading.Event()  # set at the end of a test, so the stubborn body can end at last


@actor
async def ignores_cancel(payload: dict[str, Any]) -> None:
    while not let_go.is_set():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            continue  # not even a forced cancel stops it


@pytest.fixture(autouse=True)
async def _release_stubborn_bodies() -> Any:
    """Async, so it is torn down while the test's event loop still runs the bodies."""
    let_go.clear()
    release_thread.clear()
    yield
    let_go.set()
    release_thread.set()
    await asyncio.sleep(0.1)


@actor
async def waits_then_returns(payload: dict[str, Any], ctx: JobContext[Any]) -> str:
    await ctx.cancel_event.wait()
    return "stopped"


@pytest.fixture
def backend() -> InMemoryBackend:
    return InMemoryBackend()


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    async with asyncio.timeout(timeout):
        while not (value := await check()):
            await asyncio.sleep(0.01)
        return value


def job_is(
    backend: InMemoryBackend, job_id: UUID, *statuses: JobStatus
) -> Callable[[], Awaitable[JobRow | None]]:
    async def check() -> JobRow | None:
        job = await backend.get(job_id)
        return job if job is not None and job.status in statuses else None

    return check


def started(backend: InMemoryBackend, job_id: UUID) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        job = await backend.get(job_id)
        return job is not None and job.started_at is not None

    return check


@pytest.mark.parametrize("name", ["returns_nan", "returns_nul"])
async def test_a_result_that_cannot_be_stored_fails_the_job_for_good(
    backend: InMemoryBackend, make_worker: Callable[..., Worker], name: str
) -> None:
    row = await backend.enqueue(EnqueueArgs(name, max_attempts=3))
    worker = make_worker(backend, [returns_nan, returns_nul])
    assert await asyncio.wait_for(worker.run(), 20) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED and job.attempt == 1
    assert job.error_class == "UnstorableResult" and "not storable as JSON" in (
        job.error_message or ""
    )


@pytest.mark.parametrize(
    ("fail", "status", "side_effects"),
    [(False, JobStatus.SUCCEEDED, 1), (True, JobStatus.FAILED, 0)],
)
async def test_writes_through_the_jobs_connection_commit_only_with_its_success(
    backend: InMemoryBackend,
    make_worker: Callable[..., Worker],
    fail: bool,
    status: JobStatus,
    side_effects: int,
) -> None:
    row = await backend.enqueue(
        EnqueueArgs("writes_in_its_transaction", {"fail": fail}, retry_kind="non_retryable")
    )
    worker = make_worker(backend, [writes_in_its_transaction])
    await asyncio.wait_for(worker.run(), 20)
    job = await backend.get(row.id)
    assert job is not None and job.status is status
    effects = await backend.list_jobs(JobFilter(actor="side_effect"))
    assert len(effects) == side_effects


async def test_a_forced_cancel_of_a_thread_actor_ends_abandoned_and_says_why(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    release_thread.clear()
    row = await backend.enqueue(EnqueueArgs("stuck_thread"))
    worker = make_worker(backend, [stuck_thread], until_idle=False)
    run = asyncio.create_task(worker.run())
    try:
        await until(started(backend, row.id))
        await backend.write_cancel_request(row.id, "stop")
        job = await until(job_is(backend, row.id, JobStatus.ABANDONED, JobStatus.CANCELLED))
        assert job.status is JobStatus.ABANDONED, "the thread still runs: it did not stop"
        assert job.error_message == THREAD_ABANDONED
    finally:
        release_thread.set()
        worker.stop()
        assert await asyncio.wait_for(run, 20) == 0


async def test_shutdown_abandons_a_job_that_ignores_it_and_sends_it_back_to_the_queue(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    """A deploy does not drop a long job: its attempt is abandoned (it counts, as a crash
    does) and the job waits for the next worker."""
    row = await backend.enqueue(EnqueueArgs("ignores_cancel"))
    worker = make_worker(backend, [ignores_cancel], until_idle=False)
    run = asyncio.create_task(worker.run())
    await until(started(backend, row.id))
    worker.stop("test")
    assert await asyncio.wait_for(run, 20) == 0
    job = await backend.get(row.id)
    assert job is not None and (job.status, job.cancel_phase, job.attempts_used) == (
        JobStatus.PENDING,
        0,
        1,
    )
    assert [a.outcome for a in await backend.get_attempts(row.id)] == ["abandoned"]
    escalations = [
        e for e in await backend.get_events(row.id) if e.detail.get("cancel_phase_to") == 2
    ]
    assert [e.detail["reason"] for e in escalations] == ["shutdown"]


async def test_an_operators_cancel_stays_a_cancel_when_shutdown_arrives(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs("ignores_cancel"))
    worker = make_worker(
        backend,
        [ignores_cancel],
        until_idle=False,
        cancellation_grace_period=5.0,
        lock_lease=10.0,
        termination_grace_period=20.0,
    )
    run = asyncio.create_task(worker.run())
    await until(started(backend, row.id))
    assert await backend.write_cancel_request(row.id, "operator") == "requested"
    deps = worker.deps
    assert deps is not None
    await until(lambda: _observed(worker, row.id))
    worker.stop("test")
    assert await asyncio.wait_for(run, 30) == 0
    job = await backend.get(row.id)
    assert job is not None and job.status in (JobStatus.ABANDONED, JobStatus.CANCELLED)
    assert job.status is not JobStatus.PENDING and job.cancel_reason == "operator"


async def _observed(worker: Worker, job_id: UUID) -> bool:
    held = worker.deps.active.get(job_id) if worker.deps else None
    return held is not None and held.cancel_observed_at is not None


async def test_a_prefetched_job_is_claimed_not_started_until_a_consumer_takes_it(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    first = await backend.enqueue(EnqueueArgs("waits_then_returns"))
    second = await backend.enqueue(EnqueueArgs("waits_then_returns"))
    worker = make_worker(backend, [waits_then_returns], until_idle=False, max_concurrency=1)
    run = asyncio.create_task(worker.run())
    await until(started(backend, first.id))
    queued = await until(job_is(backend, second.id, JobStatus.RUNNING))
    assert queued.started_at is None and queued.claimed_at is not None
    workers = await backend.list_workers()
    assert (workers[0].running_jobs, workers[0].claimed_jobs) == (1, 1)
    worker.stop("test")
    assert await asyncio.wait_for(run, 20) == 0
    back = await backend.get(second.id)
    assert back is not None and back.status is JobStatus.PENDING and back.attempts_used == 0
    assert await backend.get_attempts(second.id) == []
