"""Reservations in the worker, on the memory backend and PostgreSQL: never more jobs at once
than slots, the slots held for as long as the body runs (the heartbeat renews them) and given
back on every path (success, failure, cancel); a crashed worker's slots lapse and the leader's
the leaked-slot sweep frees leaked ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from taskq_core import ConcurrencyReservation, JobContext, RateLimitRegistry, RetryPolicy, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.worker.conftest import fast_settings

PAIR = ConcurrencyReservation("pair", 2)
running = 0
most_running = 0
release = asyncio.Event()


@pytest.fixture(autouse=True)
def reset_counters() -> None:
    global running, most_running, release
    running = most_running = 0
    release = asyncio.Event()  # one per test: an Event belongs to one event loop


@actor(reservations=[PAIR], retry=RetryPolicy(kind="non_retryable"))
async def render(payload: dict[str, Any]) -> str:
    global running, most_running
    running += 1
    most_running = max(most_running, running)
    try:
        await asyncio.sleep(0)  # let other consumers try to start beside it
        if payload.get("fail"):
            raise ValueError("render failed")
        return "rendered"
    finally:
        running -= 1


@actor(reservations=[ConcurrencyReservation("solo", 1)], retry=RetryPolicy(kind="non_retryable"))
async def hold(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    """Holds its slot until the test releases it (or the job is cancelled)."""
    waiter = asyncio.ensure_future(ctx.cancel_event.wait())
    try:
        await asyncio.wait(
            {waiter, asyncio.ensure_future(release.wait())}, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    return "released"


def worker(backend: Backend, actors: list[Any], *, until_idle: bool = True) -> Worker:
    return Worker(
        fast_settings(max_concurrency=4),
        {ref.name: ref for ref in actors},
        backend=backend,
        until_idle=until_idle,
        install_signal_handlers=False,
        rate_limits=RateLimitRegistry(),
    )


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    """Wait for a state (polled), bounded by ``timeout``."""
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


async def test_never_more_jobs_at_once_than_slots_and_all_slots_back_after(
    backend: Backend,
) -> None:
    jobs = [await backend.enqueue(EnqueueArgs("render", {"n": n})) for n in range(6)]
    failing = await backend.enqueue(EnqueueArgs("render", {"fail": True}))
    code = await asyncio.wait_for(worker(backend, [render]).run(), 60)
    assert code == 3  # until-idle: the failing job failed
    assert most_running <= 2
    for job in jobs:
        row = await backend.get(job.id)
        assert row is not None and (row.status, row.attempts_used) == (JobStatus.SUCCEEDED, 1)
    failed = await backend.get(failing.id)
    assert failed is not None and failed.status is JobStatus.FAILED
    assert await backend.list_held_reservation_slots() == []  # success and failure gave them back


async def test_a_slot_is_renewed_while_the_body_runs_and_freed_by_a_cancel(
    backend: Backend,
) -> None:
    job = await backend.enqueue(EnqueueArgs("hold", {}))
    run = asyncio.create_task(worker(backend, [hold]).run())
    try:
        await eventually(lambda: _held_by(backend, job.id))
        [first] = await backend.list_held_reservation_slots("solo")
        # The heartbeat renews the slot with the job's lease (TASKQ_LOCK_LEASE is 2 s here).
        await eventually(lambda: _renewed_after(backend, first.lease_expires_at))
        assert await backend.write_cancel_request(job.id, "test") == "requested"
        await asyncio.wait_for(run, 20)
    finally:
        release.set()
        run.cancel()
    row = await backend.get(job.id)
    assert row is not None and row.status is JobStatus.CANCELLED
    assert await backend.list_held_reservation_slots() == []


async def test_a_leaked_slot_is_swept_by_the_leader_and_its_jobs_run(backend: Backend) -> None:
    # A slot left behind by a job that ended without its release (a worker died after the
    # job's outcome was written): its lease still runs, so only the leaked-slot sweep frees it.
    ended = await backend.enqueue(EnqueueArgs("other", {}))
    assert await backend.write_cancel_request(ended.id, "gone") == "cancelled"
    assert await backend.acquire_reservation("solo", 1, ended.id, uuid4(), timedelta(minutes=10))
    job = await backend.enqueue(EnqueueArgs("hold", {}))
    release.set()
    assert await asyncio.wait_for(worker(backend, [hold]).run(), 60) == 0
    row = await backend.get(job.id)
    assert row is not None and (row.status, row.attempts_used) == (JobStatus.SUCCEEDED, 1)
    assert await backend.list_held_reservation_slots() == []


async def _held_by(backend: Backend, job_id: object) -> bool:
    return any(h.job_id == job_id for h in await backend.list_held_reservation_slots())


async def _renewed_after(backend: Backend, moment: Any) -> bool:
    return any(
        h.lease_expires_at > moment for h in await backend.list_held_reservation_slots("solo")
    )
