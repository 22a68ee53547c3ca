"""Cancel requests: at once for waiting jobs, a flag plus a wake-up for running ones."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import BulkCancelResult, JobFilter
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, between, job_in, reload, running_job, wait_set


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.SCHEDULED])
async def test_a_waiting_job_is_cancelled_at_once(harness: Harness, status: JobStatus) -> None:
    job, _ = await job_in(harness, status)
    before = await harness.now()
    assert await harness.backend.write_cancel_request(job.id, "not needed") == "cancelled"
    after = await harness.now()
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.CANCELLED
    assert row.cancel_reason == "not needed"
    assert between(row.cancel_requested_at, before, after)
    assert between(row.finished_at, before, after)
    [event] = await harness.backend.get_events(job.id)
    assert (event.kind, event.from_status, event.to_status) == (
        "cancel_request",
        status,
        JobStatus.CANCELLED,
    )
    assert event.detail["reason"] == "not needed"


async def test_a_running_job_is_flagged_for_its_worker(harness: Harness) -> None:
    job, worker = await running_job(harness.backend)
    assert await harness.backend.write_cancel_request(job.id, "user asked") == "requested"
    row = await reload(harness.backend, job.id)
    assert (row.status, row.cancel_phase, row.cancel_reason) == (
        JobStatus.RUNNING,
        1,
        "user asked",
    )
    [flag] = await harness.backend.poll_cancel_flags(worker)
    assert (flag.job_id, flag.cancel_phase, flag.reason) == (job.id, 1, "user asked")
    assert flag.cancel_requested_at == row.cancel_requested_at
    assert await harness.backend.poll_cancel_flags(uuid4()) == []
    event = (await harness.backend.get_events(job.id))[-1]
    assert (event.kind, event.from_status, event.to_status) == (
        "cancel_request",
        JobStatus.RUNNING,
        JobStatus.RUNNING,
    )


async def test_a_second_request_for_a_running_job_is_already_requested(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    assert await harness.backend.write_cancel_request(job.id, "first") == "requested"
    assert await harness.backend.write_cancel_request(job.id, "second") == "already_requested"
    assert (await reload(harness.backend, job.id)).cancel_reason == "first"


@pytest.mark.parametrize(
    "status",
    [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.CRASHED,
        JobStatus.ABANDONED,
    ],
)
async def test_a_finished_job_reports_terminal(harness: Harness, status: JobStatus) -> None:
    job, _ = await job_in(harness, status)
    events = await harness.backend.get_events(job.id)
    assert await harness.backend.write_cancel_request(job.id, "late") == "terminal"
    assert await reload(harness.backend, job.id) == job
    assert await harness.backend.get_events(job.id) == events


async def test_an_unknown_job_is_not_found(harness: Harness) -> None:
    assert await harness.backend.write_cancel_request(uuid4(), None) == "not_found"


async def test_a_cancel_request_on_a_running_job_wakes_the_cancel_subscribers(
    harness: Harness,
) -> None:
    job, _ = await running_job(harness.backend)
    async with harness.backend.subscribe_cancel_wake() as cancelled:
        assert await harness.backend.write_cancel_request(job.id, None) == "requested"
        await wait_set(cancelled)


async def test_the_worker_finishes_a_cooperative_cancel(harness: Harness) -> None:
    job, worker = await running_job(harness.backend)
    await harness.backend.write_cancel_request(job.id, "stop")
    assert await harness.backend.mark_cancelled(job.id, worker)
    assert (await reload(harness.backend, job.id)).status is JobStatus.CANCELLED
    assert await harness.backend.poll_cancel_flags(worker) == []


async def test_cancel_where_cancels_waiting_jobs_and_flags_running_ones(harness: Harness) -> None:
    backend = harness.backend
    running, worker = await running_job(backend, queue="q")
    flagged, _ = await running_job(backend, queue="q")
    await backend.write_cancel_request(flagged.id, "earlier")
    finished, finisher = await running_job(backend, queue="q")
    await backend.mark_succeeded(finished.id, finisher, None)
    waiting = await backend.enqueue_batch([args(queue="q"), args(queue="q")])
    scheduled = await backend.enqueue(args(queue="q", delay=timedelta(days=1)))
    elsewhere = await backend.enqueue(args(queue="other"))
    result = await backend.cancel_where(JobFilter(queue="q", limit=None), "bulk")
    assert result == BulkCancelResult(cancelled=3, requested=1)
    for job in [*waiting, scheduled]:
        row = await reload(backend, job.id)
        assert (row.status, row.cancel_reason) == (JobStatus.CANCELLED, "bulk")
    assert (await reload(backend, running.id)).cancel_phase == 1
    assert (await reload(backend, flagged.id)).cancel_reason == "earlier"
    assert (await reload(backend, finished.id)).status is JobStatus.SUCCEEDED
    assert (await reload(backend, elsewhere.id)).status is JobStatus.PENDING
    assert [flag.job_id for flag in await backend.poll_cancel_flags(worker)] == [running.id]


async def test_cancel_where_honours_status_actor_and_ids(harness: Harness) -> None:
    backend = harness.backend
    a1 = await backend.enqueue(args(actor="a"))
    a2 = await backend.enqueue(args(actor="a"))
    b = await backend.enqueue(args(actor="b"))
    result = await backend.cancel_where(JobFilter(actor="a", ids=[a2.id, b.id]), None)
    assert result == BulkCancelResult(cancelled=1, requested=0)
    assert (await reload(backend, a2.id)).status is JobStatus.CANCELLED
    assert (await reload(backend, a1.id)).status is JobStatus.PENDING
    assert (await reload(backend, b.id)).status is JobStatus.PENDING
    none = await backend.cancel_where(JobFilter(status="running"), None)
    assert none == BulkCancelResult(cancelled=0, requested=0)
    empty = await backend.cancel_where(JobFilter(status=[]), None)
    assert empty == BulkCancelResult(cancelled=0, requested=0)
    assert (await reload(backend, a1.id)).status is JobStatus.PENDING


async def test_cancel_where_acts_on_the_newest_limit_matches(harness: Harness) -> None:
    backend = harness.backend
    jobs = [await backend.enqueue(args(payload={"n": n})) for n in range(4)]
    result = await backend.cancel_where(JobFilter(limit=2), None)
    assert result == BulkCancelResult(cancelled=2, requested=0)
    statuses = [(await reload(backend, job.id)).status for job in jobs]
    assert statuses == [JobStatus.PENDING] * 2 + [JobStatus.CANCELLED] * 2


async def test_a_bulk_cancel_wakes_the_cancel_subscribers(harness: Harness) -> None:
    await running_job(harness.backend, queue="q")
    async with harness.backend.subscribe_cancel_wake() as cancelled:
        result = await harness.backend.cancel_where(JobFilter(queue="q"), None)
        assert result.requested == 1
        await wait_set(cancelled)
