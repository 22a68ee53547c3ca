"""Scope.THREAD in a running worker: each actor thread gets its own instance, made on that
thread, reused by the later jobs it runs, and closed once at worker shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.di import ProviderRegistry, Scope
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker

THREADS = 4
ROUNDS = 3


class Connection:
    """A thread-bound resource: it remembers the thread that made it."""

    def __init__(self) -> None:
        self.made_on = threading.get_ident()
        self.closed_on: int | None = None


made: list[Connection] = []
# Every round holds THREADS jobs at once, so THREADS distinct executor threads run them.
together = threading.Barrier(THREADS, timeout=10)


def connection() -> Iterator[Connection]:
    conn = Connection()
    made.append(conn)
    yield conn
    conn.closed_on = threading.get_ident()


@actor
def use_connection(payload: dict[str, int], conn: Connection) -> dict[str, int]:
    together.wait()
    return {"thread": threading.get_ident(), "made_on": conn.made_on, "conn": id(conn)}


async def test_each_actor_thread_gets_and_reuses_its_own_instance(
    make_worker: Callable[..., Worker],
) -> None:
    made.clear()
    together.reset()
    providers = ProviderRegistry()
    providers.register(Connection, connection, scope=Scope.THREAD)
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch(
            [(use_connection, {"n": n}) for n in range(THREADS * ROUNDS)]
        )
    worker = make_worker(
        backend, [use_connection], providers=providers, max_concurrency=THREADS, prefetch=0
    )
    assert await asyncio.wait_for(worker.run(), 30) == 0

    results: list[dict[str, Any]] = []
    for row in rows:
        job = await backend.get(row.id)
        assert job is not None and job.status is JobStatus.SUCCEEDED, job
        results.append(job.result)
    threads = {r["thread"] for r in results}
    assert len(threads) == THREADS  # the barrier made every round use THREADS threads
    for result in results:
        assert result["made_on"] == result["thread"]  # made on the thread that used it
    by_thread: dict[int, set[int]] = {}
    for result in results:
        by_thread.setdefault(result["thread"], set()).add(result["conn"])
    assert all(len(conns) == 1 for conns in by_thread.values())  # a thread reuses its own
    assert len(made) == THREADS  # one instance per thread, none shared
    assert all(conn.closed_on is not None for conn in made)  # closed at worker shutdown
