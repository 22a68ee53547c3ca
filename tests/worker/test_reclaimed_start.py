"""A job the reclaim sweep gave back because its body's start was never recorded (its worker
died before the batched start mark went out) has its start written before its body runs on
its next claim, so a body that kills its worker at once counts as a crash. A whole in-process
worker on both backends; the body looks at its own row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs, JobRow, Start
from taskq_core.backend.protocol.admin import Audit
from taskq_core.constants import EXIT_OK
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

EXPIRED_LEASE = timedelta(seconds=-1)  # a claim whose lease ran out: its worker is gone
NO_GRACE = timedelta(0)

# What each body saw of its own row (the backend under test is set by the test).
_backend: list[Backend] = []
_seen: dict[UUID, list[JobRow]] = {}


@actor
async def look_at_own_row(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    row = await _backend[0].get(ctx.job_id)  # the body's first await
    assert row is not None
    _seen.setdefault(ctx.job_id, []).append(row)


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        _backend[:] = [opened]
        _seen.clear()
        yield opened


async def reclaimed_unstarted(backend: Backend) -> JobRow:
    """A job whose worker died after claiming it, before its start was written, reclaimed."""
    job = await backend.enqueue(EnqueueArgs("look_at_own_row", {}))
    [claimed] = await backend.dispatch_batch(uuid4(), ["default"], 1, EXPIRED_LEASE)
    assert claimed.id == job.id
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 1
    row = await backend.get(job.id)
    assert row is not None and (row.status, row.unstarted_reclaims) == (JobStatus.PENDING, 1)
    return row


async def run(worker: Worker) -> int:
    return await asyncio.wait_for(worker.run(), 60)


async def test_the_next_run_records_its_start_before_the_body_runs(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    job = await reclaimed_unstarted(backend)
    assert await run(make_worker(backend, [look_at_own_row])) == EXIT_OK
    [seen] = _seen[job.id]
    # Its second claim: number 2 (the first claim's body may have run), the budget whole.
    assert (seen.status, seen.attempt, seen.attempts_used) == (JobStatus.RUNNING, 2, 1)
    assert seen.started_at is not None  # on the row before the body's first line ran
    row = await backend.get(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED
    assert row.started_at == seen.started_at


class _RequeuedBeforeStart:
    """Wraps the backend under test: the first start write of ``job_id`` finds the job
    requeued by an operator since its claim (the lease is no longer the worker's)."""

    def __init__(self, inner: Backend, job_id: UUID) -> None:
        self._inner = inner
        self._job_id = job_id
        self.requeued = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        if not self.requeued and any(s.job_id == self._job_id for s in starts):
            self.requeued = True
            result = await self._inner.end_running_job(self._job_id, "requeue", Audit(by="ops"))
            assert result.settled
        return await self._inner.mark_started_many(worker_id, starts)


async def test_a_lease_lost_before_the_start_write_does_not_run_the_body(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    job = await reclaimed_unstarted(backend)
    racing = _RequeuedBeforeStart(backend, job.id)
    worker = make_worker(racing, [look_at_own_row])  # type: ignore[arg-type]
    assert await run(worker) == EXIT_OK
    assert racing.requeued
    # The claim whose lease was requeued ran no body; the requeued job ran once, on its next
    # claim, under a number of its own (the same worker claiming it again gets a new lease,
    # which the fences tell from the old one), with one attempt of its budget used.
    [seen] = _seen[job.id]
    assert seen.started_at is not None
    row = await backend.get(job.id)
    assert row is not None and (row.status, row.attempt, row.attempts_used) == (
        JobStatus.SUCCEEDED,
        3,
        1,
    )
    assert (seen.attempt, seen.unstarted_reclaims) == (3, 2)  # the requeue gave it back too
