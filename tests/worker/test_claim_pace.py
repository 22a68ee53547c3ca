"""How far ahead a worker claims: as deep as its bodies are fast (TASKQ_PREFETCH unset), or
exactly TASKQ_PREFETCH. A worker of slow jobs holds few beyond its consumers, so an idle
worker of the fleet is not left watching it hold jobs it will not start for seconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus
from taskq_core.worker import pace
from taskq_core.worker.pace import PREFETCH_HORIZON, BodyPace
from taskq_core.worker.producer import ProducerLoop, ProducerTick
from taskq_core.worker.runtime import Worker

CONSUMERS = 4  # tests/worker/conftest.py's max_concurrency
CEILING = 32  # settings.effective_prefetch for 4 consumers: 8 x 4
gate = asyncio.Event()  # a new one per test (an event belongs to its test's loop)


@actor
async def instant(payload: dict[str, Any]) -> None:
    return None


@actor
async def gated(payload: dict[str, Any]) -> None:
    await gate.wait()


@pytest.fixture(autouse=True)
async def closed_gate() -> None:
    global gate
    gate = asyncio.Event()


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[ProducerTick]:
    """Every producer pass's result, in order."""
    seen: list[ProducerTick] = []
    original = ProducerLoop.run_once

    async def counted(self: ProducerLoop) -> ProducerTick:
        tick = await original(self)
        seen.append(tick)
        return tick

    monkeypatch.setattr(ProducerLoop, "run_once", counted)
    return seen


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.01)


async def held_after_more_passes(backend: InMemoryBackend, passes: list[ProducerTick]) -> int:
    """The worker's held jobs once its producer decided five more times."""
    seen = len(passes)

    async def five_more() -> bool:
        return len(passes) >= seen + 5

    await until(five_more)
    running = await backend.list_jobs(JobFilter(status="running", limit=None))
    return len(running)


async def start(worker: Worker) -> asyncio.Task[int]:
    return asyncio.create_task(worker.run())


async def finish(worker: Worker, run: asyncio.Task[int]) -> None:
    gate.set()
    worker.stop("test")
    assert await asyncio.wait_for(run, 20) == 0


async def bodies_started(backend: InMemoryBackend, count: int) -> None:
    async def started() -> bool:
        jobs = await backend.list_jobs(JobFilter(status="running", limit=None))
        return sum(job.started_at is not None for job in jobs) >= count

    await until(started)


async def drained(backend: InMemoryBackend) -> None:
    async def none_active() -> bool:
        return not await backend.list_jobs(JobFilter(active=True, limit=None))

    await until(none_active)


async def test_slow_bodies_leave_only_a_quarter_of_the_consumers_claimed_ahead(
    make_worker: Callable[..., Worker], passes: list[ProducerTick]
) -> None:
    backend = InMemoryBackend()
    await backend.enqueue_batch_fast([EnqueueArgs("gated") for _ in range(40)])
    worker = make_worker(backend, [gated], until_idle=False)
    run = await start(worker)
    await bodies_started(backend, CONSUMERS)
    assert await held_after_more_passes(backend, passes) == CONSUMERS + CONSUMERS // 4
    await finish(worker, run)


async def test_fast_bodies_fill_the_local_queue_up_to_the_ceiling(
    make_worker: Callable[..., Worker],
    passes: list[ProducerTick],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 4 consumers reach the ceiling of 32 at a mean body of 6 ms with a 50 ms horizon; a
    # loaded machine can make an instant body look that slow, so the horizon is 10 s here.
    monkeypatch.setattr(pace, "PREFETCH_HORIZON", 10.0)
    backend = InMemoryBackend()
    worker = make_worker(backend, [instant, gated], until_idle=False)
    run = await start(worker)
    await backend.enqueue_batch_fast([EnqueueArgs("instant") for _ in range(60)])
    await drained(backend)
    # The worker now knows its bodies end at once; a backlog of gated jobs then arrives.
    await backend.enqueue_batch_fast([EnqueueArgs("gated") for _ in range(80)])
    await bodies_started(backend, CONSUMERS)
    assert await held_after_more_passes(backend, passes) == CONSUMERS + CEILING
    await finish(worker, run)
    # Stopped: what ran succeeded, what waited claimed ahead went back untouched.
    jobs = await backend.list_jobs(JobFilter(limit=None))
    assert len(jobs) == 140
    assert {job.status for job in jobs} == {JobStatus.SUCCEEDED, JobStatus.PENDING}
    assert all(job.attempts_used == 0 for job in jobs if job.status is JobStatus.PENDING)


async def test_a_set_prefetch_is_held_whatever_the_pace(
    make_worker: Callable[..., Worker], passes: list[ProducerTick]
) -> None:
    backend = InMemoryBackend()
    worker = make_worker(backend, [instant, gated], until_idle=False, prefetch=2)
    run = await start(worker)
    await backend.enqueue_batch_fast([EnqueueArgs("instant") for _ in range(60)])
    await drained(backend)
    await backend.enqueue_batch_fast([EnqueueArgs("gated") for _ in range(40)])
    await bodies_started(backend, CONSUMERS)
    assert await held_after_more_passes(backend, passes) == CONSUMERS + 2
    await finish(worker, run)


@pytest.mark.parametrize(
    ("body_seconds", "ahead"),
    [
        (1.0, 4),  # 16 consumers x 50 ms / 1 s = 0.8: the floor, a quarter of them
        (0.1, 8),  # 16 x 50 ms / 100 ms
        (0.01, 80),  # 16 x 50 ms / 10 ms
        (0.001, 128),  # 800: the ceiling
    ],
)
def test_the_prefetch_is_what_the_consumers_start_within_the_horizon(
    body_seconds: float, ahead: int
) -> None:
    assert PREFETCH_HORIZON == 0.05
    pace = BodyPace()
    assert pace.prefetch(16, None, 128) == 4  # no body ended yet: the floor
    for _ in range(50):
        pace.ran(body_seconds)
    assert pace.prefetch(16, None, 128) == ahead
    assert pace.prefetch(16, 7, 128) == 7  # TASKQ_PREFETCH set: always that


def test_the_mean_follows_a_change_of_pace_within_a_few_dozen_bodies() -> None:
    pace = BodyPace()
    for _ in range(50):
        pace.ran(1.0)
    for _ in range(40):
        pace.ran(0.001)
    assert pace.prefetch(16, None, 128) == 128
    for _ in range(40):
        pace.ran(1.0)
    assert pace.prefetch(16, None, 128) == 4


@pytest.mark.parametrize(
    ("prefetch", "said"),
    [(None, ("paced", CEILING)), (2, ("fixed", 2))],
    ids=["unset: paced", "set: fixed"],
)
async def test_the_start_line_says_how_far_ahead_the_worker_claims(
    make_worker: Callable[..., Worker], prefetch: int | None, said: tuple[str, int]
) -> None:
    worker = make_worker(InMemoryBackend(), [instant], prefetch=prefetch)
    with capture_logs() as logs:
        assert await asyncio.wait_for(worker.run(), 30) == 0
    [started] = [entry for entry in logs if entry["event"] == "worker_started"]
    assert (started["prefetch"], started["prefetch_max"]) == said
