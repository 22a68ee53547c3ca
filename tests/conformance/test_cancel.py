"""Cancel requests: at once for waiting jobs, a flag plus a wake-up for running ones; once
requested, a cancel wins over every later rescheduling of the job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import BulkCancelResult, JobFilter, JobRow
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import (
    BOOM,
    LEASE,
    args,
    between,
    job_in,
    reload,
    running_job,
    wait_set,
)


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
    assert await harness.backend.mark_cancelled(job.lease())
    assert (await reload(harness.backend, job.id)).status is JobStatus.CANCELLED
    assert await harness.backend.poll_cancel_flags(worker) == []


async def test_cancel_where_cancels_waiting_jobs_and_flags_running_ones(harness: Harness) -> None:
    backend = harness.backend
    running, worker = await running_job(backend, queue="q")
    flagged, _ = await running_job(backend, queue="q")
    await backend.write_cancel_request(flagged.id, "earlier")
    finished, _ = await running_job(backend, queue="q")
    await backend.mark_succeeded(finished.lease(), None)
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


async def requested(harness: Harness, **fields: Any) -> JobRow:
    """A started job of its own queue whose cancel an operator asked for."""
    job, _ = await running_job(harness.backend, **fields)
    assert await harness.backend.write_cancel_request(job.id, "operator") == "requested"
    return await reload(harness.backend, job.id)


async def assert_cancelled_for_good(harness: Harness, job: JobRow, outcome: str) -> None:
    """The job ended cancelled with one attempt of ``outcome``, and is never dispatched again."""
    row = await reload(harness.backend, job.id)
    assert (row.status, row.cancel_reason) == (JobStatus.CANCELLED, "operator")
    assert row.finished_at is not None and row.lock_expires_at is None
    assert [a.outcome for a in await harness.backend.get_attempts(job.id)] == [outcome]
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.from_status, last.to_status) == (JobStatus.RUNNING, JobStatus.CANCELLED)
    await harness.travel(3600)
    assert await harness.backend.promote_scheduled_jobs() == 0
    assert await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE) == []


async def test_a_requested_cancel_wins_over_a_retry(harness: Harness) -> None:
    job = await requested(harness, max_attempts=3)
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(seconds=5))
    assert row is not None and row.status is JobStatus.CANCELLED
    assert row.error_class == "ValueError"  # the actor's error stays visible
    await assert_cancelled_for_good(harness, job, "failed")


async def test_a_requested_cancel_wins_over_a_retry_past_the_deadline(harness: Harness) -> None:
    job = await requested(harness, schedule_to_close=timedelta(seconds=10))
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(minutes=5))
    assert row is not None and row.status is JobStatus.CANCELLED


async def test_a_requested_cancel_wins_over_a_snooze(harness: Harness) -> None:
    job = await requested(harness, metadata={"batch_id": "b1"})
    assert await harness.backend.mark_snoozed(job.lease(), timedelta(seconds=5)) == "cancelled"
    row = await reload(harness.backend, job.id)
    assert (row.attempt, row.metadata) == (1, {"batch_id": "b1"})  # no snooze counted
    await assert_cancelled_for_good(harness, job, "cancelled")


@pytest.mark.parametrize("consume_budget", [True, False])
async def test_a_requested_cancel_wins_over_a_retry_after(
    harness: Harness, consume_budget: bool
) -> None:
    job = await requested(harness, max_attempts=1, schedule_to_close=timedelta(seconds=10))
    outcome = await harness.backend.mark_retry_after(
        job.lease(), timedelta(minutes=5), consume_budget=consume_budget
    )
    assert outcome == "cancelled"  # before the deadline and the budget are looked at
    assert (await reload(harness.backend, job.id)).attempt == 1
    await assert_cancelled_for_good(harness, job, "cancelled")


async def test_a_requested_cancel_wins_over_releasing_a_started_lease(harness: Harness) -> None:
    job = await requested(harness, max_attempts=3)
    worker = job.lease().worker_id
    assert await harness.backend.release_leases(worker, [job.lease()], reason="heartbeat_lost") == 1
    await assert_cancelled_for_good(harness, job, "crashed")


async def test_a_requested_cancel_wins_over_releasing_an_unstarted_lease(
    harness: Harness,
) -> None:
    job = await requested(harness, started=False)
    worker = job.lease().worker_id
    assert await harness.backend.release_leases(worker, [job.lease()], reason="shutdown") == 1
    row = await reload(harness.backend, job.id)
    assert (row.status, row.attempt, row.attempts_used) == (JobStatus.CANCELLED, 1, 0)
    assert await harness.backend.get_attempts(job.id) == []
    assert await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE) == []


async def test_a_success_after_a_cancel_request_stays_succeeded(harness: Harness) -> None:
    job = await requested(harness)
    assert await harness.backend.mark_succeeded(job.lease(), {"finished": "anyway"})
    row = await reload(harness.backend, job.id)
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, {"finished": "anyway"})
    assert row.cancel_reason == "operator"  # the request stays on record


async def test_a_shutdown_escalates_a_job_without_a_cancel_request_from_phase_zero(
    harness: Harness,
) -> None:
    job, worker = await running_job(harness.backend)
    assert await harness.backend.write_cancel_escalation(job.lease(), reason="shutdown")
    assert not await harness.backend.write_cancel_escalation(job.lease(), reason="shutdown")
    row = await reload(harness.backend, job.id)
    assert (row.status, row.cancel_phase) == (JobStatus.RUNNING, 2)
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.kind, last.from_status, last.to_status, last.worker_id) == (
        "state_change",
        JobStatus.RUNNING,
        JobStatus.RUNNING,
        worker,
    )
    assert last.detail == {"cancel_phase_from": 0, "cancel_phase_to": 2, "reason": "shutdown"}


async def test_an_attempt_a_shutdown_abandons_goes_back_to_the_queue_like_a_crash(
    harness: Harness,
) -> None:
    """A deploy must not drop a long job: the attempt is abandoned (and counts), the job
    goes back to pending while retries remain, and runs again."""
    job, worker = await running_job(harness.backend, max_attempts=3)
    assert await harness.backend.write_cancel_escalation(job.lease(), reason="shutdown")
    reason = "did not stop within the 5s shutdown grace (a thread cannot be killed)"
    assert await harness.backend.mark_abandoned(job.lease(), reason)
    row = await reload(harness.backend, job.id)
    assert (row.status, row.error_class, row.error_message) == (
        JobStatus.PENDING,
        "Abandoned",
        reason,
    )
    assert (row.attempts_used, row.locked_by_worker, row.cancel_phase) == (1, None, 0)
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id, attempt.error_message) == (
        "abandoned",
        worker,
        reason,
    )
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.to_status, last.detail) == (JobStatus.PENDING, {"reason": reason})
    [again] = await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    assert (again.id, again.attempt, again.cancel_phase) == (job.id, 2, 0)


async def test_an_abandoned_job_keeps_the_reason_it_was_given_up(harness: Harness) -> None:
    """On its last attempt a shutdown's abandon ends the job abandoned."""
    job, worker = await running_job(harness.backend, max_attempts=1)
    assert await harness.backend.write_cancel_escalation(job.lease(), reason="shutdown")
    reason = "did not stop within the 5s shutdown grace (a thread cannot be killed)"
    assert await harness.backend.mark_abandoned(job.lease(), reason)
    row = await reload(harness.backend, job.id)
    assert (row.status, row.error_class, row.error_message) == (
        JobStatus.ABANDONED,
        "Abandoned",
        reason,
    )
    assert row.finished_at is not None and row.lock_expires_at is None
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id, attempt.error_class, attempt.error_message) == (
        "abandoned",
        worker,
        "Abandoned",
        reason,
    )
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.to_status, last.detail) == (JobStatus.ABANDONED, {"reason": reason})


async def test_an_operator_cancel_whose_body_ignores_it_ends_abandoned_for_good(
    harness: Harness,
) -> None:
    job = await requested(harness, max_attempts=3)
    assert await harness.backend.write_cancel_escalation(job.lease())
    assert await harness.backend.mark_abandoned(job.lease(), "ignored its forced cancel")
    row = await reload(harness.backend, job.id)
    assert (row.status, row.error_class) == (JobStatus.ABANDONED, "Abandoned")
    assert [a.outcome for a in await harness.backend.get_attempts(job.id)] == ["abandoned"]
    assert await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE) == []


async def test_an_interrupted_attempt_goes_back_in_its_place_without_using_the_budget(
    harness: Harness,
) -> None:
    """A graceful shutdown stopped the body: its attempt is recorded as interrupted (not a
    failure, not a retry-after), the job waits in its place and its next body has the next
    number, with its whole budget still there."""
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=1)
    assert await backend.mark_interrupted(job.lease(), reason="shutdown", ran_for=1.0)
    row = await reload(backend, job.id)
    assert (row.status, row.attempt, row.attempts_used) == (JobStatus.PENDING, 1, 0)
    assert (row.scheduled_at, row.locked_by_worker, row.error_class) == (
        job.scheduled_at,
        None,
        None,
    )
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.attempt, attempt.outcome, attempt.worker_id) == (1, "interrupted", worker)
    last = (await backend.get_events(job.id))[-1]
    assert (last.from_status, last.to_status, last.detail) == (
        JobStatus.RUNNING,
        JobStatus.PENDING,
        {"reason": "shutdown"},
    )
    assert not await backend.mark_interrupted(job.lease())  # that lease is gone
    [again] = await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    assert (again.id, again.attempt, again.attempts_used) == (job.id, 2, 1)


async def test_a_requested_cancel_wins_over_an_interrupt(harness: Harness) -> None:
    job = await requested(harness)
    assert await harness.backend.mark_interrupted(job.lease(), ran_for=0.5)
    await assert_cancelled_for_good(harness, job, "cancelled")


async def test_a_retry_after_a_shutdown_escalation_starts_the_next_attempt_unforced(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    assert await backend.write_cancel_escalation(job.lease(), reason="shutdown")
    row = await backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(seconds=5))
    assert row is not None and (row.status, row.cancel_phase) == (JobStatus.SCHEDULED, 0)
    await harness.travel(6)
    assert await backend.promote_scheduled_jobs() == 1
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert again.cancel_phase == 0
    assert not await backend.mark_abandoned(again.lease(), "not forced")
    assert await backend.write_cancel_escalation(again.lease(), reason="shutdown")


@pytest.mark.parametrize(
    ("fields", "delay", "outcome"),
    [
        ({"max_attempts": 1}, timedelta(seconds=5), "failed:MaxAttemptsExceeded"),
        ({"schedule_to_close": timedelta(seconds=10)}, timedelta(minutes=5), "failed"),
    ],
    ids=["retry-after-past-the-budget", "snooze-past-the-deadline"],
)
async def test_a_forced_job_that_fails_instead_of_rescheduling_keeps_its_cancel_phase(
    harness: Harness, fields: dict[str, Any], delay: timedelta, outcome: str
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, **fields)
    assert await backend.write_cancel_escalation(job.lease(), reason="shutdown")
    if outcome == "failed":
        assert await backend.mark_snoozed(job.lease(), delay) == outcome
    else:
        assert await backend.mark_retry_after(job.lease(), delay) == outcome
    row = await reload(backend, job.id)
    assert (row.status, row.cancel_phase) == (JobStatus.FAILED, 2)
