"""Guards of the runtime: the sibling contract and heartbeat-loss isolation (memory backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, HeartbeatResult, Lease
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.statemachine import JobStatus
from taskq_core.worker.producer import ProducerLoop
from taskq_core.worker.runtime import Worker


@actor
async def long_job(payload: dict[str, Any]) -> None:
    await asyncio.sleep(30)


class HeartbeatOutage(InMemoryBackend):
    """A backend whose heartbeats fail while ``down``, as if the database went away."""

    down = False

    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        if self.down:
            raise DatabaseUnavailableError("PostgreSQL is unavailable (connection reset)")
        return await super().heartbeat(worker_id, lock_lease, leases, is_leader=is_leader)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


async def test_lost_heartbeats_give_the_jobs_up_and_the_worker_carries_on(
    make_worker: Callable[..., Worker],
) -> None:
    backend = HeartbeatOutage()
    row = await backend.enqueue(EnqueueArgs("long_job", max_attempts=3))
    worker = make_worker(backend, [long_job], until_idle=False, max_heartbeat_failures=1)
    run = asyncio.create_task(worker.run())
    await until(lambda: _started(backend, row.id))
    backend.down = True
    await until(lambda: _given_up(worker))
    assert not run.done(), "a worker must survive lost heartbeats"
    backend.down = False  # the database is back: the given-up job is handed back
    await until(lambda: _status(backend, row.id, JobStatus.SCHEDULED))
    assert [a.error_class for a in await backend.get_attempts(row.id)] == ["HeartbeatLost"]
    worker.stop()
    assert await asyncio.wait_for(run, 15) == 0


async def _started(backend: InMemoryBackend, job_id: UUID) -> bool:
    job = await backend.get(job_id)
    return job is not None and job.started_at is not None


async def _status(backend: InMemoryBackend, job_id: UUID, status: JobStatus) -> bool:
    job = await backend.get(job_id)
    return job is not None and job.status is status


async def _given_up(worker: Worker) -> bool:
    deps = worker.deps
    return deps is not None and len(deps.active) == 0 and deps.database.outages > 0


async def test_a_sibling_returning_early_stops_the_worker_with_exit_1(
    make_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def quits(self: ProducerLoop) -> None:
        return None

    monkeypatch.setattr(ProducerLoop, "run", quits)
    worker = make_worker(InMemoryBackend(), [long_job], until_idle=False)
    assert await asyncio.wait_for(worker.run(), 10) == 1
