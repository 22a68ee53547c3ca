"""The leader's sweeps on the backend's own clock, and the reclaim-event outbox cursor."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from taskq_core.backend.protocol import EventRow
from taskq_core.constants import UNSTARTED_RECLAIM_LIMIT
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import GRACE, LEASE, args, reload, running_job, wait_set

NO_GRACE = timedelta(0)
EXPIRED = LEASE.total_seconds() + 1


async def test_scheduled_jobs_become_pending_once_due(harness: Harness) -> None:
    backend = harness.backend
    soon = await backend.enqueue(args(delay=timedelta(seconds=10)))
    later = await backend.enqueue(args(delay=timedelta(minutes=10)))
    assert await backend.promote_scheduled_jobs() == 0
    await harness.travel(11)
    assert await backend.promote_scheduled_jobs() == 1
    row = await reload(backend, soon.id)
    assert row.status is JobStatus.PENDING
    assert (await reload(backend, later.id)).status is JobStatus.SCHEDULED
    [event] = await backend.get_events(soon.id)
    assert (event.kind, event.from_status, event.to_status) == (
        "state_change",
        JobStatus.SCHEDULED,
        JobStatus.PENDING,
    )


async def test_promoting_scheduled_jobs_wakes_the_subscribers(harness: Harness) -> None:
    await harness.backend.enqueue(args(delay=timedelta(seconds=5)))
    await harness.travel(6)
    async with harness.backend.subscribe_wake() as woken:
        assert await harness.backend.promote_scheduled_jobs() == 1
        await wait_set(woken)


async def test_waiting_jobs_past_their_deadline_fail(harness: Harness) -> None:
    backend = harness.backend
    pending = await backend.enqueue(args(schedule_to_close=timedelta(seconds=30)))
    scheduled = await backend.enqueue(
        args(delay=timedelta(minutes=5), schedule_to_close=timedelta(seconds=30))
    )
    relaxed = await backend.enqueue(args(schedule_to_close=timedelta(hours=1)))
    running, _ = await running_job(backend, schedule_to_close=timedelta(seconds=30))
    assert await backend.fail_overdue_jobs() == 0
    await harness.travel(31)
    assert await backend.fail_overdue_jobs() == 2
    for job, was in ((pending, JobStatus.PENDING), (scheduled, JobStatus.SCHEDULED)):
        row = await reload(backend, job.id)
        assert (row.status, row.error_class) == (JobStatus.FAILED, "DeadlineExceeded")
        assert row.finished_at is not None
        [event] = await backend.get_events(job.id)
        assert (event.from_status, event.to_status) == (was, JobStatus.FAILED)
        assert await backend.get_attempts(job.id) == []
    assert (await reload(backend, relaxed.id)).status is JobStatus.PENDING
    assert (await reload(backend, running.id)).status is JobStatus.RUNNING


async def test_an_expired_lock_with_retries_left_goes_back_to_pending(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    await harness.travel(EXPIRED - 2)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 0
    await harness.travel(2)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    row = await reload(backend, job.id)
    assert row.status is JobStatus.PENDING
    assert row.attempt == 1
    assert row.locked_by_worker is None and row.lock_expires_at is None
    assert row.error_class == "WorkerCrashed"
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.error_class, attempt.worker_id) == (
        "crashed",
        "WorkerCrashed",
        worker,
    )
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.from_status, event.to_status, event.worker_id) == (
        "reclaim",
        JobStatus.RUNNING,
        JobStatus.PENDING,
        worker,
    )
    assert event.detail == {
        "from_state": "running",
        "to_state": "pending",
        "reason": "lock_expired",
        "worker_id": str(worker),
        "started": True,
        "blamed": True,  # its body was the only one of that worker
    }
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert again.attempt == 2


async def test_an_expired_lock_without_retries_crashes_the_job(harness: Harness) -> None:
    backend = harness.backend
    exhausted, _ = await running_job(backend, max_attempts=1)
    final, _ = await running_job(backend, retry_kind="non_retryable", max_attempts=5)
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 2
    for job in (exhausted, final):
        row = await reload(backend, job.id)
        assert row.status is JobStatus.CRASHED and row.finished_at is not None
        event = (await backend.get_events(job.id))[-1]
        assert (event.kind, event.detail["to_state"]) == ("reclaim", "crashed")


async def test_indefinite_jobs_are_retried_until_their_deadline(harness: Harness) -> None:
    backend = harness.backend
    open_ended, _ = await running_job(backend, retry_kind="indefinite", max_attempts=1)
    deadlined, _ = await running_job(
        backend, retry_kind="indefinite", max_attempts=1, schedule_to_close=timedelta(seconds=20)
    )
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 2
    assert (await reload(backend, open_ended.id)).status is JobStatus.PENDING
    assert (await reload(backend, deadlined.id)).status is JobStatus.CRASHED


async def test_a_cancel_in_flight_gets_the_graces_and_a_minute_before_reclaim(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=3)
    await backend.write_cancel_request(job.id, "stop")
    headroom = EXPIRED + 2 * GRACE.total_seconds() + 60
    await harness.travel(headroom - 2)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 0
    await harness.travel(2)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    assert (await reload(backend, job.id)).status is JobStatus.CANCELLED


async def test_a_requested_cancel_wins_over_the_retry_of_a_reclaimed_job(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    await backend.write_cancel_request(job.id, "stop")
    await harness.travel(EXPIRED + 2 * GRACE.total_seconds() + 60)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    row = await reload(backend, job.id)
    assert (row.status, row.cancel_phase, row.cancel_reason) == (JobStatus.CANCELLED, 1, "stop")
    assert row.finished_at is not None and row.locked_by_worker is None
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id) == ("crashed", worker)
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.to_status, event.detail["started"]) == (
        "reclaim",
        JobStatus.CANCELLED,
        True,
    )
    assert await backend.dispatch_batch(worker, [job.queue], 1, LEASE) == []


async def test_an_exhausted_job_with_a_cancel_in_flight_ends_cancelled(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=1)
    await backend.write_cancel_request(job.id, "stop")
    await harness.travel(EXPIRED + 60)
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 1
    row = await reload(backend, job.id)
    assert row.status is JobStatus.CANCELLED
    [attempt] = await backend.get_attempts(job.id)
    assert attempt.outcome == "crashed"
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.to_status) == ("reclaim", JobStatus.CANCELLED)


async def test_a_live_lease_is_never_reclaimed(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    await harness.travel(EXPIRED - 2)
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 0
    assert (await reload(backend, job.id)).status is JobStatus.RUNNING


async def test_a_reclaim_wakes_the_subscribers(harness: Harness) -> None:
    await running_job(harness.backend, max_attempts=1)
    await harness.travel(EXPIRED)
    async with harness.backend.subscribe_wake() as woken:
        assert await harness.backend.reclaim_expired_leases(GRACE, GRACE) == 1
        await wait_set(woken)


async def reclaim_three(harness: Harness) -> list[UUID]:
    jobs = [(await running_job(harness.backend, max_attempts=n))[0] for n in (1, 2, 1)]
    await harness.travel(EXPIRED)
    assert await harness.backend.reclaim_expired_leases(GRACE, GRACE) == 3
    return [job.id for job in jobs]


def ids(events: list[EventRow]) -> list[int]:
    return [event.id for event in events]


async def test_reclaim_events_are_hidden_until_the_visibility_delay_passes(
    harness: Harness,
) -> None:
    job_ids = await reclaim_three(harness)
    assert await harness.backend.poll_reclaim_events(0) == []
    await harness.travel(1)
    assert await harness.backend.poll_reclaim_events(0) == []
    await harness.travel(1.5)
    events = await harness.backend.poll_reclaim_events(0)
    assert {event.job_id for event in events} == set(job_ids)
    assert {event.kind for event in events} == {"reclaim"}
    assert ids(events) == sorted(ids(events))


async def test_the_reclaim_cursor_returns_events_after_it_in_id_order(harness: Harness) -> None:
    backend = harness.backend
    await reclaim_three(harness)
    await harness.travel(3)
    events = await backend.poll_reclaim_events(0)
    assert len(events) == 3
    first_two = await backend.poll_reclaim_events(0, limit=2)
    assert ids(first_two) == ids(events)[:2]
    rest = await backend.poll_reclaim_events(first_two[-1].id)
    assert ids(rest) == ids(events)[2:]
    assert await backend.poll_reclaim_events(events[-1].id) == []
    # At-least-once: the same cursor reads the same events again.
    assert ids(await backend.poll_reclaim_events(0)) == ids(events)


async def test_the_reclaim_cursor_skips_other_event_kinds(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    await backend.mark_succeeded(job.lease(), None)
    await backend.write_cancel_request((await backend.enqueue(args())).id, None)
    await harness.travel(10)
    assert await backend.poll_reclaim_events(0) == []


async def test_a_custom_visibility_delay_applies_per_call(harness: Harness) -> None:
    await reclaim_three(harness)
    assert len(await harness.backend.poll_reclaim_events(0, visibility_delay=NO_GRACE)) == 3
    await harness.travel(3)
    assert await harness.backend.poll_reclaim_events(0, visibility_delay=timedelta(hours=1)) == []


async def test_later_reclaims_continue_the_cursor(harness: Harness) -> None:
    first = await reclaim_three(harness)
    await harness.travel(3)
    seen = await harness.backend.poll_reclaim_events(0)
    assert {event.job_id for event in seen} == set(first)
    late, _ = await running_job(harness.backend, max_attempts=1)
    await harness.travel(EXPIRED)
    assert await harness.backend.reclaim_expired_leases(GRACE, GRACE) == 1
    await harness.travel(3)
    [event] = await harness.backend.poll_reclaim_events(seen[-1].id)
    assert event.job_id == late.id and event.id > seen[-1].id


async def test_a_reclaimed_job_that_never_started_goes_back_to_pending_without_an_attempt(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, started=False, max_attempts=1)
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    row = await reload(backend, job.id)
    assert (row.status, row.attempt, row.attempts_used) == (JobStatus.PENDING, 1, 0)
    assert row.locked_by_worker is None and row.lock_expires_at is None
    assert row.started_at is None and row.error_class is None
    assert await backend.get_attempts(job.id) == []
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.from_status, event.to_status, event.worker_id) == (
        "reclaim",
        JobStatus.RUNNING,
        JobStatus.PENDING,
        worker,
    )
    assert event.detail == {
        "from_state": "running",
        "to_state": "pending",
        "reason": "lock_expired",
        "worker_id": str(worker),
        "started": False,
    }
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    # A body may have run unrecorded under number 1: the next one is 2, and the one
    # attempt of max_attempts=1 is still not used up.
    assert (again.attempt, again.attempts_used) == (2, 1)


async def test_a_job_reclaimed_unstarted_past_the_limit_counts_as_started(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, started=False, max_attempts=1)
    for _ in range(UNSTARTED_RECLAIM_LIMIT):
        await harness.travel(EXPIRED)
        assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
        assert (await reload(backend, job.id)).attempts_used == 0
        [_again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert await backend.get_attempts(job.id) == []
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    row = await reload(backend, job.id)
    assert (row.status, row.attempts_used, row.error_class) == (
        JobStatus.CRASHED,
        1,
        "WorkerCrashed",
    )
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.attempt, attempt.outcome) == (UNSTARTED_RECLAIM_LIMIT + 1, "crashed")
    reclaims = [e for e in await backend.get_events(job.id) if e.kind == "reclaim"]
    assert [e.detail["started"] for e in reclaims] == [False] * UNSTARTED_RECLAIM_LIMIT + [True]


async def test_a_requested_cancel_wins_over_the_reclaim_of_a_job_that_never_started(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=False)
    await backend.write_cancel_request(job.id, "stop")
    await harness.travel(EXPIRED + 60)
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 1
    row = await reload(backend, job.id)
    assert (row.status, row.attempts_used) == (JobStatus.CANCELLED, 0)
    assert await backend.get_attempts(job.id) == []
    event = (await backend.get_events(job.id))[-1]
    assert (event.to_status, event.detail["started"]) == (JobStatus.CANCELLED, False)
