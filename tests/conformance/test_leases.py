"""Leases (protocol v2): every worker write names the attempt it holds and changes nothing once
that attempt is no longer the row's, even when the same worker claimed the job again; start
marks, transactional completions and released leases are fenced the same way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core import jsontext
from taskq_core.backend.protocol import Backend, ErrorInfo, JobRow, Lease, Start, Success
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, LEASE, args, between, lease, reload, running_job

EXPIRED = LEASE.total_seconds() + 1
NO_GRACE = timedelta(0)

StaleWrite = Callable[[Backend, Lease], Awaitable[object]]
REFUSED: tuple[object, ...] = (False, None, "noop", 0, set())

# Every write a worker makes about a job it runs, as it would make it with ``lease``.
FENCED_WRITES: dict[str, StaleWrite] = {
    "mark_started_many": lambda b, w: b.mark_started_many(
        w.worker_id, [Start(w.job_id, w.attempt)]
    ),
    "mark_succeeded": lambda b, w: b.mark_succeeded(w, {"late": True}),
    "mark_succeeded_many": lambda b, w: b.mark_succeeded_many(
        w.worker_id, [Success(w.job_id, w.attempt, '{"late": true}')]
    ),
    "mark_failed_or_retry": lambda b, w: b.mark_failed_or_retry(w, BOOM, None),
    "mark_failed_or_retry(delay)": lambda b, w: b.mark_failed_or_retry(
        w, BOOM, timedelta(seconds=1)
    ),
    "mark_cancelled": lambda b, w: b.mark_cancelled(w),
    "mark_snoozed": lambda b, w: b.mark_snoozed(w, timedelta(seconds=1)),
    "mark_retry_after": lambda b, w: b.mark_retry_after(w, timedelta(seconds=1)),
    "mark_retry_after(no budget)": lambda b, w: b.mark_retry_after(
        w, timedelta(seconds=1), consume_budget=False
    ),
    "write_cancel_escalation": lambda b, w: b.write_cancel_escalation(w, reason="shutdown"),
    "mark_abandoned": lambda b, w: b.mark_abandoned(w, "stale"),
    "release_leases": lambda b, w: b.release_leases(w.worker_id, [w], reason="stale"),
}


async def second_attempt(harness: Harness, *, started: bool = True) -> tuple[JobRow, Lease]:
    """A job its worker ran once (the attempt failed and was retried) and claimed again:
    returns the row of attempt 2 and the worker's lease of attempt 1."""
    backend = harness.backend
    first, worker = await running_job(backend, max_attempts=5)
    await backend.mark_failed_or_retry(first.lease(), BOOM, timedelta(seconds=1))
    await harness.travel(2)
    assert await backend.promote_scheduled_jobs() == 1
    [again] = await backend.dispatch_batch(worker, [first.queue], 1, LEASE)
    if started:
        await backend.mark_started_many(worker, [Start(again.id, again.attempt)])
    row = await reload(backend, again.id)
    assert (row.attempt, row.locked_by_worker) == (2, worker)
    return row, first.lease()


@pytest.mark.parametrize("name", sorted(FENCED_WRITES))
async def test_a_write_by_the_right_worker_with_a_stale_attempt_changes_nothing(
    harness: Harness, name: str
) -> None:
    backend = harness.backend
    job, stale = await second_attempt(harness, started=name != "mark_started_many")
    if name == "mark_abandoned":  # give the stale abandon something it could have done
        assert await backend.write_cancel_escalation(job.lease(), reason="shutdown")
        job = await reload(backend, job.id)
    assert stale.worker_id == job.locked_by_worker and stale.attempt == job.attempt - 1
    events = await backend.get_events(job.id)
    attempts = await backend.get_attempts(job.id)
    outcome = await FENCED_WRITES[name](backend, stale)
    assert outcome in REFUSED, f"{name} with a stale attempt returned {outcome!r}"
    assert await reload(backend, job.id) == job
    assert await backend.get_events(job.id) == events
    assert await backend.get_attempts(job.id) == attempts


@pytest.mark.parametrize("name", sorted(FENCED_WRITES))
async def test_a_write_naming_a_later_attempt_than_the_rows_changes_nothing(
    harness: Harness, name: str
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=name != "mark_started_many")
    ahead = lease(job, attempt=job.attempt + 1)
    outcome = await FENCED_WRITES[name](backend, ahead)
    assert outcome in REFUSED, f"{name} with a later attempt returned {outcome!r}"
    assert await reload(backend, job.id) == job
    assert await backend.get_attempts(job.id) == []


async def test_a_job_reclaimed_and_claimed_again_by_the_same_worker_refuses_the_old_lease(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 1
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert (again.locked_by_worker, again.attempt) == (worker, 2)
    assert not await backend.mark_succeeded(job.lease(), {"from": "attempt 1"})
    assert (
        await backend.mark_succeeded_many(
            worker, [Success(job.id, job.attempt, '{"from": "attempt 1"}')]
        )
        == set()
    )
    assert await reload(backend, job.id) == again
    assert await backend.mark_succeeded(again.lease(), {"from": "attempt 2"})
    row = await reload(backend, job.id)
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, {"from": "attempt 2"})
    assert [(a.attempt, a.outcome) for a in await backend.get_attempts(job.id)] == [
        (1, "crashed"),
        (2, "succeeded"),
    ]


# --- start marks ------------------------------------------------------------------------------


async def test_a_start_mark_dates_the_start_from_how_long_the_body_has_run(
    harness: Harness,
) -> None:
    job, worker = await running_job(harness.backend, started=False)
    before = await harness.now()
    assert await harness.backend.mark_started_many(worker, [Start(job.id, job.attempt, 2.5)]) == {
        job.id
    }
    after = await harness.now()
    row = await reload(harness.backend, job.id)
    ran = timedelta(seconds=2.5)
    assert between(row.started_at, before - ran, after - ran)
    assert row.status is JobStatus.RUNNING and not row.is_claimed


async def test_a_start_is_recorded_only_once(harness: Harness) -> None:
    job, worker = await running_job(harness.backend)
    assert job.started_at is not None
    await harness.travel(30)
    assert await harness.backend.mark_started_many(worker, [Start(job.id, job.attempt)]) == set()
    started_at = (await reload(harness.backend, job.id)).started_at
    assert started_at is not None
    assert await harness.now() - started_at >= timedelta(seconds=30)  # the first start stays


async def test_a_start_is_recorded_only_for_the_lease_holder(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    mine, _ = await running_job(backend, worker=worker, started=False)
    theirs, _ = await running_job(backend, started=False)
    done = await backend.mark_started_many(
        worker, [Start(mine.id, mine.attempt), Start(theirs.id, theirs.attempt)]
    )
    assert done == {mine.id}
    assert (await reload(backend, theirs.id)).started_at is None


async def test_a_start_mark_does_not_write_an_event(harness: Harness) -> None:
    job, worker = await running_job(harness.backend, started=False)
    events = await harness.backend.get_events(job.id)
    assert await harness.backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    assert await harness.backend.get_events(job.id) == events


# --- transactional completion -----------------------------------------------------------------


async def test_a_success_written_with_a_connection_commits_with_the_callers_writes(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    async with backend.transaction() as connection:
        side_effect = await backend.enqueue(args(queue=job.queue), connection=connection)
        assert await backend.mark_succeeded_with_conn(connection, job.lease(), '{"n": 7}')
        assert (await reload(backend, job.id)).status is JobStatus.RUNNING  # not committed
    row = await reload(backend, job.id)
    assert (row.status, row.result, row.locked_by_worker) == (JobStatus.SUCCEEDED, {"n": 7}, worker)
    assert (await reload(backend, side_effect.id)).status is JobStatus.PENDING
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id) == ("succeeded", worker)
    last = (await backend.get_events(job.id))[-1]
    assert (last.from_status, last.to_status) == (JobStatus.RUNNING, JobStatus.SUCCEEDED)


async def test_a_success_written_with_a_connection_rolls_back_with_the_transaction(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    with pytest.raises(RuntimeError, match="the actor's write failed"):
        async with backend.transaction() as connection:
            side_effect = await backend.enqueue(args(queue=job.queue), connection=connection)
            assert await backend.mark_succeeded_with_conn(connection, job.lease(), "1")
            raise RuntimeError("the actor's write failed")
    assert await reload(backend, job.id) == job
    assert await backend.get(side_effect.id) is None
    assert await backend.get_attempts(job.id) == []
    assert await backend.mark_succeeded(job.lease(), 2)  # the lease is still good


async def test_a_success_written_with_a_connection_is_fenced_by_the_lease(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, stale = await second_attempt(harness)
    async with backend.transaction() as connection:
        assert not await backend.mark_succeeded_with_conn(connection, stale, '"late"')
        assert not await backend.mark_succeeded_with_conn(
            connection, lease(job, uuid4()), '"stolen"'
        )
    assert await reload(backend, job.id) == job


async def test_a_success_written_with_a_connection_dates_an_unrecorded_start(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=False)
    before = await harness.now()
    async with backend.transaction() as connection:
        assert await backend.mark_succeeded_with_conn(connection, job.lease(), None, ran_for=40)
    after = await harness.now()
    row = await reload(backend, job.id)
    ran = timedelta(seconds=40)
    assert row.status is JobStatus.SUCCEEDED and row.result is None
    assert between(row.started_at, before - ran, after - ran)


async def test_a_success_pending_in_an_open_transaction_keeps_the_job_from_the_reclaim_sweep(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    await harness.travel(EXPIRED)  # the lease has run out, but no sweep has run yet
    async with backend.transaction() as connection:
        assert await backend.mark_succeeded_with_conn(connection, job.lease(), '"done"')
        assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 0  # row held
    row = await reload(backend, job.id)
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, "done")
    assert await backend.reclaim_expired_leases(NO_GRACE, NO_GRACE) == 0


async def test_a_lease_being_settled_in_an_open_transaction_is_held_but_not_extended(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    async with backend.transaction() as connection:
        assert await backend.mark_succeeded_with_conn(connection, job.lease(), None)
        result = await backend.heartbeat(worker, timedelta(minutes=10), [job.lease()])
        assert (result.held, result.extended) == ({job.id}, frozenset())
    assert (await reload(backend, job.id)).status is JobStatus.SUCCEEDED


async def test_one_transaction_settles_a_lease_only_once(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    async with backend.transaction() as connection:
        assert await backend.mark_succeeded_with_conn(connection, job.lease(), '"first"')
        assert not await backend.mark_succeeded_with_conn(connection, job.lease(), '"second"')
    assert (await reload(backend, job.id)).result == "first"
    assert len(await backend.get_attempts(job.id)) == 1


NOT_JSON_TEXT = [
    pytest.param("NaN", id="nan"),
    pytest.param('{"x": Infinity}', id="infinity"),
    pytest.param('"a\\u0000b"', id="nul-escape"),
    pytest.param("{not json", id="not-json"),
]


@pytest.mark.parametrize("text", NOT_JSON_TEXT)
async def test_a_batch_with_result_text_that_cannot_be_stored_writes_nothing(
    harness: Harness, text: str
) -> None:
    backend = harness.backend
    worker = uuid4()
    good, _ = await running_job(backend, worker=worker)
    bad, _ = await running_job(backend, worker=worker)
    successes = [Success(good.id, good.attempt, "1"), Success(bad.id, bad.attempt, text)]
    with pytest.raises(jsontext.UnstorableValueError, match="not storable as JSON"):
        await backend.mark_succeeded_many(worker, successes)
    assert await reload(backend, good.id) == good
    assert await reload(backend, bad.id) == bad
    assert await backend.get_attempts(bad.id) == []


@pytest.mark.parametrize("text", NOT_JSON_TEXT)
async def test_a_transactional_success_with_result_text_that_cannot_be_stored_is_refused(
    harness: Harness, text: str
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    with pytest.raises(jsontext.UnstorableValueError, match="not storable as JSON"):
        async with backend.transaction() as connection:
            await backend.mark_succeeded_with_conn(connection, job.lease(), text)
    assert await reload(backend, job.id) == job


# --- releasing leases -------------------------------------------------------------------------


async def test_a_released_started_job_with_retries_left_is_scheduled_with_a_crashed_attempt(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    lost = ErrorInfo("HeartbeatLost", f"worker {worker} lost its heartbeat")
    before = await harness.now()
    released = await backend.release_leases(
        worker,
        [job.lease()],
        reason="heartbeat_lost",
        retry_delay=timedelta(seconds=20),
        error=lost,
    )
    after = await harness.now()
    assert released == 1
    row = await reload(backend, job.id)
    assert (row.status, row.attempt) == (JobStatus.SCHEDULED, 1)
    assert between(row.scheduled_at, before + timedelta(seconds=20), after + timedelta(seconds=20))
    assert row.locked_by_worker is None and row.lock_expires_at is None
    assert (row.error_class, row.error_message) == ("HeartbeatLost", lost.message)
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.attempt, attempt.outcome, attempt.worker_id, attempt.error_class) == (
        1,
        "crashed",
        worker,
        "HeartbeatLost",
    )
    last = (await backend.get_events(job.id))[-1]
    assert (last.kind, last.from_status, last.to_status, last.worker_id) == (
        "state_change",
        JobStatus.RUNNING,
        JobStatus.SCHEDULED,
        worker,
    )
    assert last.detail == {"reason": "heartbeat_lost", "started": True}


async def test_a_released_started_job_without_retries_crashes(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    exhausted, _ = await running_job(backend, worker=worker, max_attempts=1)
    final, _ = await running_job(backend, worker=worker, retry_kind="non_retryable")
    released = await backend.release_leases(
        worker, [exhausted.lease(), final.lease()], reason="heartbeat_lost"
    )
    assert released == 2
    for job in (exhausted, final):
        row = await reload(backend, job.id)
        assert row.status is JobStatus.CRASHED and row.finished_at is not None
        assert row.error_class == "WorkerReleased"  # the default error names the release
        [attempt] = await backend.get_attempts(job.id)
        assert (attempt.outcome, attempt.error_class) == ("crashed", "WorkerReleased")


async def test_releasing_leases_treats_each_job_by_whether_its_body_started(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    started, _ = await running_job(backend, worker=worker, max_attempts=3)
    claimed, _ = await running_job(backend, worker=worker, started=False, max_attempts=3)
    untouched, _ = await running_job(backend, worker=worker)
    assert await backend.release_leases(worker, [started.lease(), claimed.lease()], reason="x") == 2
    assert (await reload(backend, started.id)).status is JobStatus.SCHEDULED
    row = await reload(backend, claimed.id)
    assert (row.status, row.attempt, row.attempts_used) == (JobStatus.PENDING, 1, 0)
    assert await reload(backend, untouched.id) == untouched  # not named: still held


async def test_releasing_a_stale_lease_leaves_the_new_attempt_running(harness: Harness) -> None:
    backend = harness.backend
    job, stale = await second_attempt(harness)
    assert await backend.release_leases(stale.worker_id, [stale], reason="heartbeat_lost") == 0
    assert await reload(backend, job.id) == job
