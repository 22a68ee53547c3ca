"""The state machine, end to end: every transition of VALID_TRANSITIONS has an operation that
performs it on both backends, and every operation refuses the transitions the table lacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import Backend, JobFilter, JobRow, Lease, Start, Success
from taskq_core.backend.protocol.workflows import workflow_id_of
from taskq_core.statemachine import (
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    VALID_TRANSITIONS,
    JobStatus,
    is_valid_transition,
)
from tests.conformance.conftest import Harness
from tests.conformance.states import (
    BOOM,
    GRACE,
    LEASE,
    job_in,
    released_on_a_failure,
    reload,
)

P, S, R = JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING
OK, FAILED, CANCELLED = JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED
CRASHED, ABANDONED, W = JobStatus.CRASHED, JobStatus.ABANDONED, JobStatus.WAITING

Driver = Callable[[Harness, JobRow, UUID | None], Awaitable[object]]


async def dispatch(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)


async def cancel(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.write_cancel_request(job.id, "driver")


async def deadline(h: Harness, job: JobRow, _: UUID | None) -> object:
    await h.travel(2 * 3600)
    return await h.backend.fail_overdue_jobs()


async def promote(h: Harness, job: JobRow, _: UUID | None) -> object:
    await h.travel(2 * 3600)
    return await h.backend.promote_scheduled_jobs()


async def succeed(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.mark_succeeded(job.lease(), None)


async def fail(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.mark_failed_or_retry(job.lease(), BOOM, None)


async def retry_later(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(seconds=5))


async def cooperative_cancel(h: Harness, job: JobRow, _: UUID | None) -> object:
    return await h.backend.mark_cancelled(job.lease())


async def reclaim(h: Harness, job: JobRow, _: UUID | None) -> object:
    await h.travel(LEASE.total_seconds() + 1)
    return await h.backend.reclaim_expired_leases(GRACE, GRACE)


async def release(h: Harness, job: JobRow, _: UUID | None) -> object:
    """The workflow step's one dependency succeeds, and the hook's release runs."""
    [parent] = (await h.backend.get_upstream(job.id)).values()
    worker = uuid4()
    queue = (await reload(h.backend, parent.job_id)).queue
    [claimed] = await h.backend.dispatch_batch(worker, [queue], 1, LEASE)
    assert claimed.id == parent.job_id
    await h.backend.mark_started_many(worker, [Start(claimed.id, claimed.attempt)])
    await h.backend.mark_succeeded(claimed.lease(), None)
    return await h.backend.release_workflow_steps([claimed.id])


async def retry_dependency(h: Harness, job: JobRow, _: UUID | None) -> object:
    """The workflow retries the failed dependency the step was released on."""
    workflow_id = workflow_id_of(job.metadata)
    assert workflow_id is not None
    return await h.backend.retry_workflow(workflow_id)


async def abandon(h: Harness, job: JobRow, _: UUID | None) -> object:
    await h.backend.write_cancel_request(job.id, "driver")
    await h.backend.write_cancel_escalation(job.lease())
    return await h.backend.mark_abandoned(job.lease(), "driver")


# (from, to) -> (extra enqueue fields, the operation that performs it)
DRIVERS: dict[tuple[JobStatus, JobStatus], tuple[dict[str, object], Driver]] = {
    (P, R): ({}, dispatch),
    (P, CANCELLED): ({}, cancel),
    (P, FAILED): ({"schedule_to_close": timedelta(hours=1)}, deadline),
    (S, P): ({}, promote),
    (S, CANCELLED): ({}, cancel),
    (S, FAILED): ({"schedule_to_close": timedelta(hours=1)}, deadline),
    (R, OK): ({}, succeed),
    (R, FAILED): ({}, fail),
    (R, CANCELLED): ({}, cooperative_cancel),
    (R, CRASHED): ({"max_attempts": 1}, reclaim),
    (R, ABANDONED): ({}, abandon),
    (R, S): ({}, retry_later),
    (R, P): ({"max_attempts": 2}, reclaim),
    (W, P): ({}, release),
    (W, S): ({"delay": timedelta(hours=1)}, release),
    (W, CANCELLED): ({}, cancel),
    (P, W): ({}, retry_dependency),
    (S, W): ({"delay": timedelta(hours=1)}, retry_dependency),
}


def test_every_transition_of_the_table_has_a_driver() -> None:
    table = {(src, dst) for src, targets in VALID_TRANSITIONS.items() for dst in targets}
    assert set(DRIVERS) == table


@pytest.mark.parametrize(
    ("src", "dst"), sorted(DRIVERS), ids=[f"{s.value}-{d.value}" for s, d in sorted(DRIVERS)]
)
async def test_each_valid_transition_happens_and_is_recorded(
    harness: Harness, src: JobStatus, dst: JobStatus
) -> None:
    fields, drive = DRIVERS[(src, dst)]
    if dst is W:  # only a step released on a dependency's failure goes back to waiting
        job, worker = await released_on_a_failure(harness.backend, **fields), None
        assert job.status is src
    else:
        job, worker = await job_in(harness, src, **fields)
    events_before = len(await harness.backend.get_events(job.id))
    await drive(harness, job, worker)
    row = await reload(harness.backend, job.id)
    assert row.status is dst
    events = await harness.backend.get_events(job.id)
    transitions = [(e.from_status, e.to_status) for e in events[events_before:]]
    assert transitions[-1] == (src, dst)
    assert (row.finished_at is not None) == (dst in TERMINAL_STATUSES)


WorkerWrite = Callable[[Backend, Lease], Awaitable[object]]
REFUSED: tuple[object, ...] = (False, None, "noop", 0, set())


async def succeed_in_a_transaction(backend: Backend, held: Lease) -> object:
    async with backend.transaction() as connection:
        return await backend.mark_succeeded_with_conn(connection, held, None)


WORKER_WRITES: dict[str, WorkerWrite] = {
    "mark_started_many": lambda b, w: b.mark_started_many(
        w.worker_id, [Start(w.job_id, w.attempt)]
    ),
    "mark_succeeded": lambda b, w: b.mark_succeeded(w, None),
    "mark_succeeded_many": lambda b, w: b.mark_succeeded_many(
        w.worker_id, [Success(w.job_id, w.attempt, None)]
    ),
    "mark_succeeded_with_conn": succeed_in_a_transaction,
    "mark_failed_or_retry": lambda b, w: b.mark_failed_or_retry(w, BOOM, None),
    "mark_failed_or_retry(delay)": lambda b, w: b.mark_failed_or_retry(
        w, BOOM, timedelta(seconds=1)
    ),
    "mark_cancelled": lambda b, w: b.mark_cancelled(w),
    "mark_snoozed": lambda b, w: b.mark_snoozed(w, timedelta(seconds=1)),
    "mark_retry_after": lambda b, w: b.mark_retry_after(w, timedelta(seconds=1)),
    "write_cancel_escalation": lambda b, w: b.write_cancel_escalation(w, reason="shutdown"),
    "mark_abandoned": lambda b, w: b.mark_abandoned(w, "driver"),
    "release_leases": lambda b, w: b.release_leases(w.worker_id, [w], reason="driver"),
}
NOT_RUNNING = [s for s in JobStatus if s is not R]


@pytest.mark.parametrize("status", NOT_RUNNING, ids=[s.value for s in NOT_RUNNING])
async def test_worker_writes_refuse_jobs_that_are_not_running(
    harness: Harness, status: JobStatus
) -> None:
    job, worker = await job_in(harness, status)
    held = Lease(job.id, worker or uuid4(), max(job.attempt, 1))
    events = await harness.backend.get_events(job.id)
    attempts = await harness.backend.get_attempts(job.id)
    for name, write in WORKER_WRITES.items():
        outcome = await write(harness.backend, held)
        assert outcome in REFUSED, f"{name} on a {status.value} job returned {outcome!r}"
    assert await reload(harness.backend, job.id) == job
    assert await harness.backend.get_events(job.id) == events
    assert await harness.backend.get_attempts(job.id) == attempts


@pytest.mark.parametrize("status", list(JobStatus), ids=[s.value for s in JobStatus])
async def test_operator_retry_only_re_pends_failed_crashed_or_cancelled_jobs(
    harness: Harness, status: JobStatus
) -> None:
    job, _ = await job_in(harness, status, max_attempts=1)
    retried = await harness.backend.retry_job(job.id)
    row = await reload(harness.backend, job.id)
    if status in RETRYABLE_STATUSES:
        assert retried
        assert (row.status, row.attempt, row.attempts_used) == (P, job.attempt, 0)
        assert row.error_class is None and row.finished_at is None
        assert (row.cancel_phase, row.cancel_requested_at) == (0, None)
        last = (await harness.backend.get_events(job.id))[-1]
        assert (last.from_status, last.to_status) == (status, P)
        assert last.detail == {"reason": "operator_retry"}
    else:
        assert not retried
        assert row == job


async def test_an_operator_retry_gets_a_fresh_attempt_budget(harness: Harness) -> None:
    job, _ = await job_in(harness, FAILED, max_attempts=1)
    assert await harness.backend.retry_job(job.id)
    [again] = await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    # The next body's number follows the last one's; its budget starts over.
    assert (again.attempt, again.attempts_used) == (job.attempt + 1, 1)
    assert not await harness.backend.retry_job(uuid4())


async def test_retry_where_re_pends_matching_retryable_jobs(harness: Harness) -> None:
    backend = harness.backend
    failed, _ = await job_in(harness, FAILED, queue="q")
    crashed, _ = await job_in(harness, CRASHED, queue="q")
    succeeded, _ = await job_in(harness, OK, queue="q")
    elsewhere, _ = await job_in(harness, FAILED, queue="other")
    assert await backend.retry_where(JobFilter(queue="q", status="crashed")) == 1
    assert (await reload(backend, crashed.id)).status is P
    assert await backend.retry_where(JobFilter(queue="q")) == 1
    assert (await reload(backend, failed.id)).status is P
    assert (await reload(backend, succeeded.id)).status is OK
    assert (await reload(backend, elsewhere.id)).status is FAILED


async def test_a_whole_life_records_only_valid_transitions(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await job_in(harness, R, max_attempts=3)
    assert worker is not None
    await backend.mark_snoozed(job.lease(), timedelta(seconds=1))
    await harness.travel(2)
    await backend.promote_scheduled_jobs()
    await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    await harness.travel(LEASE.total_seconds() + 1)
    await backend.reclaim_expired_leases(GRACE, GRACE)
    [claimed] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
    await backend.write_cancel_request(job.id, "stop")
    await backend.write_cancel_escalation(claimed.lease())
    await backend.mark_cancelled(claimed.lease())
    await backend.retry_job(job.id)
    [claimed] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    await backend.mark_succeeded(claimed.lease(), None)
    events = await backend.get_events(job.id)
    moves = [(e.from_status, e.to_status) for e in events if e.from_status != e.to_status]
    assert len(moves) == 10
    for event in events:
        assert event.from_status is not None and event.to_status is not None
        if event.from_status == event.to_status:
            assert event.from_status is R  # cancel request / escalation: no status change
        elif event.detail.get("reason") != "operator_retry":
            assert is_valid_transition(event.from_status, event.to_status), event
    assert (await reload(backend, job.id)).status is OK
