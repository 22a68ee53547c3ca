"""The whole worker runtime, in-process, on the memory backend: outcomes and exit codes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Annotated, Any
from uuid import UUID

import pytest
from pydantic import BaseModel

from taskq_core.actors import JobContext, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.client import JobsClient
from taskq_core.di import MissingProviderError, ProviderRegistry, Scope, ScopeViolationError
from taskq_core.errors import ActorConfigDriftError
from taskq_core.retry import RetryAfter, RetryPolicy, Snooze
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker

QUICK_RETRY = RetryPolicy(max_attempts=3, base=timedelta(milliseconds=10), jitter=0.0)


class Add(BaseModel):
    a: int
    b: int


@actor
async def add(payload: Add, ctx: JobContext[Add]) -> dict[str, int]:
    return {"sum": payload.a + payload.b, "attempt": ctx.attempt}


@actor(retry=QUICK_RETRY)
async def flaky(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    if ctx.attempt < payload["succeed_on"]:
        raise RuntimeError(f"boom on attempt {ctx.attempt}")
    return "ok"


@actor(retry=RetryPolicy(kind="non_retryable"))
async def doomed(payload: dict[str, Any]) -> None:
    raise ValueError("never works")


@actor
def blocking_square(payload: dict[str, int]) -> int:
    return payload["x"] ** 2


@pytest.fixture
def backend() -> InMemoryBackend:
    return InMemoryBackend()


async def run(worker: Worker, timeout: float = 20.0) -> int:
    return await asyncio.wait_for(worker.run(), timeout)


async def wait_running(backend: InMemoryBackend, job_id: UUID) -> None:
    """Wait (up to 2 s) until the worker has started the job."""
    async with asyncio.timeout(2):
        while (job := await backend.get(job_id)) is None or job.status is not JobStatus.RUNNING:
            await asyncio.sleep(0.01)


async def test_until_idle_drains_every_job_and_stores_results(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch([(add, Add(a=i, b=1)) for i in range(50)])
    code = await run(make_worker(backend, [add]))
    assert code == 0
    for i, row in enumerate(rows):
        job = await backend.get(row.id)
        assert job is not None and job.status is JobStatus.SUCCEEDED
        assert job.result == {"sum": i + 1, "attempt": 1}


async def test_sync_actors_run_in_threads(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        row = await client.enqueue(blocking_square, {"x": 7})
    assert await run(make_worker(backend, [blocking_square])) == 0
    job = await backend.get(row.id)
    assert job is not None and job.result == 49


async def test_transient_failures_retry_then_succeed(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        row = await client.enqueue(flaky, {"succeed_on": 3})
    assert await run(make_worker(backend, [flaky])) == 0
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.attempt == 3
    outcomes = [a.outcome for a in await backend.get_attempts(row.id)]
    assert outcomes == ["retried", "retried", "succeeded"]


class SlowToAnswerFailures(InMemoryBackend):
    """Writes a failure at once but answers late, as a busy database does: the job is
    terminal in the store while its worker has not counted the failure yet."""

    async def mark_failed_or_retry(self, *args: Any, **kwargs: Any) -> Any:
        row = await super().mark_failed_or_retry(*args, **kwargs)
        await asyncio.sleep(0.3)  # several idle polls (0.05 s) while the answer is in flight
        return row


async def test_a_failure_still_being_written_keeps_the_drain_from_exiting_0(
    make_worker: Callable[..., Worker],
) -> None:
    backend = SlowToAnswerFailures()
    async with JobsClient(backend=backend) as client:
        row = await client.enqueue(doomed, {})
    assert await run(make_worker(backend, [doomed])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED


async def test_exhausted_retries_fail_and_exit_3(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        row = await client.enqueue(flaky, {"succeed_on": 99})
    assert await run(make_worker(backend, [flaky])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.attempt == 3 and job.error_class == "RuntimeError"


async def test_non_retryable_fails_at_once(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        row = await client.enqueue(doomed, {})
    assert await run(make_worker(backend, [doomed])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED and job.attempt == 1


async def test_invalid_payload_fails_without_retry(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs(actor="add", payload={"a": "x"}))
    assert await run(make_worker(backend, [add])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error_class == "PayloadValidationError" and job.attempt == 1


@actor
async def snoozer(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> int:
    if ctx.metadata.get("snooze_count", 0) < 2:
        raise Snooze(timedelta(milliseconds=20))
    return ctx.attempt


async def test_snooze_reschedules_without_using_attempts(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs(actor="snoozer"))
    assert await run(make_worker(backend, [snoozer])) == 0
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    # Three bodies, three numbers (the last body saw 3); one attempt of the budget used.
    assert (job.result, job.attempts_used, job.metadata["snooze_count"]) == (3, 1, 2)
    outcomes = [(a.attempt, a.outcome) for a in await backend.get_attempts(row.id)]
    assert outcomes == [(1, "snoozed"), (2, "snoozed"), (3, "succeeded")]


@actor(retry=RetryPolicy(max_attempts=2, base=timedelta(milliseconds=10)))
async def rate_limited(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    raise RetryAfter(timedelta(milliseconds=10), consume_budget=payload["consume"])


async def test_retry_after_with_budget_exhausts_attempts(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(
        EnqueueArgs(actor="rate_limited", payload={"consume": True}, max_attempts=2)
    )
    assert await run(make_worker(backend, [rate_limited])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error_class == "MaxAttemptsExceeded"


@actor(timeout=0.05, retry=RetryPolicy(kind="non_retryable"))
async def slow(payload: dict[str, Any]) -> None:
    await asyncio.sleep(5)


async def test_attempt_timeout_fails_the_attempt(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs(actor="slow"))
    assert await run(make_worker(backend, [slow])) == 3
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error_class == "TimeoutError"


@actor
async def patient(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    await ctx.cancel_event.wait()
    return "saw the cancel"


async def test_cooperative_cancel_ends_cancelled(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs(actor="patient"))
    worker = make_worker(backend, [patient])
    task = asyncio.create_task(run(worker))
    await wait_running(backend, row.id)
    assert await backend.write_cancel_request(row.id, "test") == "requested"
    assert await task == 0
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.CANCELLED


@actor
async def stubborn(payload: dict[str, Any]) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(1.5)  # ignores the forced cancel for longer than the cleanup grace


async def test_non_cooperative_job_is_forced_then_abandoned(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(EnqueueArgs(actor="stubborn"))
    worker = make_worker(backend, [stubborn])
    task = asyncio.create_task(run(worker))
    await wait_running(backend, row.id)
    await backend.write_cancel_request(row.id, "test")
    assert await task == 0
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.ABANDONED and job.cancel_phase == 2


class Greeter:
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting


teardowns: list[str] = []


async def greeter_provider() -> AsyncIterator[Greeter]:
    yield Greeter("hello")
    teardowns.append("greeter")


@actor
async def greet(payload: dict[str, str], greeter: Greeter) -> str:
    return f"{greeter.greeting} {payload['name']}"


async def test_dependencies_are_injected_and_torn_down(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    providers = ProviderRegistry()
    providers.register(Greeter, greeter_provider, scope=Scope.TRANSIENT)
    teardowns.clear()
    row = await backend.enqueue(EnqueueArgs(actor="greet", payload={"name": "ada"}))
    assert await run(make_worker(backend, [greet], providers=providers)) == 0
    job = await backend.get(row.id)
    assert job is not None and job.result == "hello ada"
    assert teardowns == ["greeter"]


async def test_missing_provider_refuses_to_start(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    with pytest.raises(MissingProviderError, match="greeter"):
        await run(make_worker(backend, [greet]))


class Pool:
    pass


def pool_factory(greeter: Greeter) -> Pool:
    return Pool()


async def test_wider_scope_depending_on_narrower_is_refused(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    providers = ProviderRegistry()
    providers.register(Greeter, greeter_provider, scope=Scope.TRANSIENT)
    providers.register(Pool, pool_factory, scope=Scope.PROCESS)
    with pytest.raises(ScopeViolationError):
        await run(make_worker(backend, [greet], providers=providers))


@actor
async def needs_pool(payload: dict[str, Any], pool: Annotated[Pool, Scope.LOOP]) -> bool:
    return isinstance(pool, Pool)


async def test_structural_drift_refuses_start_unless_forced(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    moved = actor(name="add", queue="elsewhere")(add.fn)
    assert await run(make_worker(backend, [add])) == 0
    with pytest.raises(ActorConfigDriftError, match=r"add\.queue"):
        await run(make_worker(backend, [moved]))
    assert await run(make_worker(backend, [moved], force_update_actor_config=True)) == 0
    config = await backend.get_actor_config("add")
    assert config is not None and config.queue == "elsewhere"


async def test_max_runtime_exits_4(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    await backend.enqueue(
        EnqueueArgs(actor="add", payload={"a": 1, "b": 2}, delay=timedelta(hours=1))
    )
    assert await run(make_worker(backend, [add], idle_max_runtime=0.3)) == 4


async def test_scheduled_job_runs_when_due(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    row = await backend.enqueue(
        EnqueueArgs(actor="add", payload={"a": 1, "b": 2}, delay=timedelta(milliseconds=300))
    )
    assert await run(make_worker(backend, [add])) == 0
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.started_at is not None and job.started_at >= job.scheduled_at
