"""Job progress: the worker holding a running job writes its latest report; nobody else can,
and a report never replaces a newer one (``progress_seq`` only grows, across attempts too)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import Lease
from taskq_core.progress import ProgressReport
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, LEASE, job_in, reload, running_job


def state(current: float, total: float | None = 10, message: str | None = None) -> dict[str, Any]:
    return {
        "current": current,
        "total": total,
        "message": message,
        "ts": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
    }


async def test_the_holder_writes_the_report_and_any_reader_sees_it(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert job.progress_seq == 0 and job.progress_state is None
    written = state(3, 10, "resizing 3 of 10: é ✓")
    assert await backend.write_progress(job.lease(), 1, written) is True
    row = await reload(backend, job.id)
    assert (row.progress_seq, row.progress_state) == (1, written)
    report = ProgressReport.of_row(row)
    assert report is not None
    assert (report.seq, report.current, report.total, report.percent) == (1, 3, 10, 30.0)
    assert row.status is JobStatus.RUNNING


async def test_numbers_keep_their_json_types(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert await backend.write_progress(job.lease(), 1, state(2.5, None))
    row = await reload(backend, job.id)
    assert row.progress_state == state(2.5, None)
    assert await backend.write_progress(job.lease(), 2, state(7, 9))
    stored = (await reload(backend, job.id)).progress_state
    assert stored is not None and isinstance(stored["current"], int)


async def test_an_older_or_equal_seq_changes_nothing(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert await backend.write_progress(job.lease(), 5, state(5))
    assert await backend.write_progress(job.lease(), 4, state(4)) is False
    assert await backend.write_progress(job.lease(), 5, state(6)) is False
    row = await reload(backend, job.id)
    assert (row.progress_seq, row.progress_state) == (5, state(5))


async def test_a_stranger_or_a_stale_attempt_writes_nothing(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    assert await backend.write_progress(Lease(job.id, uuid4(), job.attempt), 1, state(1)) is False
    stale = Lease(job.id, worker, job.attempt - 1)
    assert await backend.write_progress(stale, 1, state(1)) is False
    assert await reload(backend, job.id) == job


@pytest.mark.parametrize(
    "status",
    [JobStatus.PENDING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED],
    ids=lambda s: s.value,
)
async def test_a_job_that_is_not_running_takes_no_progress(
    harness: Harness, status: JobStatus
) -> None:
    backend = harness.backend
    job, worker = await job_in(harness, status)
    holder = Lease(job.id, worker or uuid4(), max(job.attempt, 1))
    assert await backend.write_progress(holder, 1, state(1)) is False
    assert await reload(backend, job.id) == job


async def test_a_reclaimed_job_refuses_its_old_worker(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=5)
    await harness.travel(LEASE.total_seconds() + 1)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    assert (await reload(backend, job.id)).status is JobStatus.PENDING
    assert await backend.write_progress(job.lease(), 1, state(1)) is False


async def test_the_seq_carries_over_to_the_next_attempt(harness: Harness) -> None:
    backend = harness.backend
    first, worker = await running_job(backend, max_attempts=5)
    assert await backend.write_progress(first.lease(), 7, state(7))
    await backend.mark_failed_or_retry(first.lease(), BOOM, timedelta(seconds=1))
    await harness.travel(2)
    assert await backend.promote_scheduled_jobs() == 1
    [again] = await backend.dispatch_batch(worker, [first.queue], 1, LEASE)
    assert (again.attempt, again.progress_seq, again.progress_state) == (2, 7, state(7))
    assert await backend.write_progress(again.lease(), 7, state(1)) is False
    assert await backend.write_progress(again.lease(), 8, state(1))
    assert (await reload(backend, first.id)).progress_seq == 8


async def test_the_report_stays_on_the_finished_job(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert await backend.write_progress(job.lease(), 3, state(10, 10, "done"))
    assert await backend.mark_succeeded(job.lease(), {"ok": True})
    row = await reload(backend, job.id)
    assert row.status is JobStatus.SUCCEEDED
    assert (row.progress_seq, row.progress_state) == (3, state(10, 10, "done"))


async def test_progress_writes_no_event(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    before = await backend.get_events(job.id)
    for seq in range(1, 4):
        assert await backend.write_progress(job.lease(), seq, state(seq))
    assert await backend.get_events(job.id) == before
