"""Guards of the runtime: the sibling contract and heartbeat-loss isolation (memory backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, HeartbeatResult
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.statemachine import JobStatus
from taskq_core.worker.producer import ProducerLoop
from taskq_core.worker.runtime import Worker


@actor
async def long_job(payload: dict[str, Any]) -> None:
    await asyncio.sleep(30)


class HeartbeatOutage(InMemoryBackend):
    """A backend whose heartbeats fail, as if the database went away for this worker."""

    async def heartbeat(
        self, worker_id: UUID, lock_lease: timedelta, *, is_leader: bool = False
    ) -> HeartbeatResult:
        raise DatabaseUnavailableError("PostgreSQL is unavailable (connection reset)")


async def test_lost_heartbeats_isolate_the_worker_and_hand_its_jobs_back(
    make_worker: Callable[..., Worker],
) -> None:
    backend = HeartbeatOutage()
    row = await backend.enqueue(EnqueueArgs("long_job", max_attempts=3))
    worker = make_worker(backend, [long_job], until_idle=False, max_heartbeat_failures=1)
    code = await asyncio.wait_for(worker.run(), 15)
    assert code == 1
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.SCHEDULED
    assert [a.error_class for a in await backend.get_attempts(row.id)] == ["HeartbeatLost"]


async def test_a_sibling_returning_early_stops_the_worker_with_exit_1(
    make_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def quits(self: ProducerLoop) -> None:
        return None

    monkeypatch.setattr(ProducerLoop, "run", quits)
    worker = make_worker(InMemoryBackend(), [long_job], until_idle=False)
    assert await asyncio.wait_for(worker.run(), 10) == 1
