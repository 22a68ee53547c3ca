"""While a worker runs, the process's collector makes its young passes every
GC_YOUNG_THRESHOLD allocations; an application that runs workers in its own process gets its
own threshold back once the last of them stopped."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.constants import GC_YOUNG_THRESHOLD
from taskq_core.worker.runtime import Worker

APPLICATION_THRESHOLD = (500, 7, 9)
seen: list[tuple[int, int, int]] = []


@actor
async def read_threshold(payload: dict[str, Any]) -> None:
    seen.append(gc.get_threshold())


@pytest.fixture(autouse=True)
def application_threshold() -> Iterator[None]:
    """The application's own threshold, whatever pytest runs with; put back after."""
    before = gc.get_threshold()
    gc.set_threshold(*APPLICATION_THRESHOLD)
    seen.clear()
    yield
    gc.set_threshold(*before)


async def test_a_running_worker_spaces_young_collections_and_gives_the_threshold_back(
    make_worker: Callable[..., Worker],
) -> None:
    backend = InMemoryBackend()
    await backend.enqueue_batch_fast([EnqueueArgs("read_threshold")])
    assert await make_worker(backend, [read_threshold]).run() == 0
    assert seen == [(GC_YOUNG_THRESHOLD, 7, 9)]
    assert gc.get_threshold() == APPLICATION_THRESHOLD


async def test_the_threshold_comes_back_only_when_the_last_of_two_workers_stopped(
    make_worker: Callable[..., Worker],
) -> None:
    long_lived = make_worker(InMemoryBackend(), [read_threshold], until_idle=False)
    running = asyncio.create_task(long_lived.run())
    short = InMemoryBackend()
    await short.enqueue_batch_fast([EnqueueArgs("read_threshold")])
    assert await make_worker(short, [read_threshold]).run() == 0
    # The first worker still runs: its collector stays spaced.
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 7, 9)
    long_lived.stop("test")
    assert await asyncio.wait_for(running, 20) == 0
    assert gc.get_threshold() == APPLICATION_THRESHOLD
    assert seen == [(GC_YOUNG_THRESHOLD, 7, 9)]
