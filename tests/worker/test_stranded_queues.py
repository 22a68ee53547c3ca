"""StrandedQueues.run_once judges consumers with the shared liveness rule and threshold."""

from __future__ import annotations

from datetime import timedelta

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, WorkerInfo
from taskq_core.clock import FakeClock
from taskq_core.ids import uuid7
from taskq_core.liveness import worker_stale_after
from taskq_core.worker.runtime import Worker
from taskq_core.worker.sweeps.stranded_queues import StrandedQueues
from tests.worker.conftest import fast_settings


async def test_a_queue_is_stranded_once_its_only_consumer_is_past_stale_after() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    settings = fast_settings()
    deps = Worker(settings, {}, backend=backend, clock=clock)._build_deps(backend)
    stale_after = worker_stale_after(settings)
    check = StrandedQueues(deps, stale_after=stale_after)
    await backend.enqueue(EnqueueArgs("work", queue="media"))
    assert await check.run_once() == ["media"]  # nobody consumes it
    await backend.register_worker(
        WorkerInfo(uuid7(), "host-a", 1, queues=["media"], actors=["work"], concurrency=1)
    )
    assert await check.run_once() == []
    clock.advance(stale_after)
    assert await check.run_once() == []  # silent for exactly stale_after: still alive
    clock.advance(timedelta(microseconds=1))
    assert await check.run_once() == ["media"]


async def test_the_check_asks_for_waiting_queues_not_for_counts_over_the_table() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    deps = Worker(fast_settings(), {}, backend=backend, clock=clock)._build_deps(backend)

    async def no_counts() -> None:
        raise AssertionError("count_by_queue_status reads the whole jobs table")

    backend.count_by_queue_status = no_counts  # type: ignore[assignment,method-assign]
    check = StrandedQueues(deps, stale_after=worker_stale_after(deps.settings))
    await backend.enqueue(EnqueueArgs("work", queue="later", delay=timedelta(minutes=5)))
    assert await check.run_once() == []  # a scheduled job waits for its time, not a worker
    clock.advance(timedelta(minutes=5))
    await backend.promote_scheduled_jobs()
    assert await check.run_once() == ["later"]
