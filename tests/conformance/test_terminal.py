"""The worker's fenced writes: success, failure and retry, cancel, snooze, retry-after,
escalation and abandonment; each holds the row's lease (worker and attempt) or does nothing."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core import jsontext
from taskq_core.backend.protocol import ActorDeclaration, Lease, Success
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, LEASE, args, between, lease, reload, running_job


async def test_mark_succeeded_stores_the_result_with_an_attempt_and_an_event(
    harness: Harness,
) -> None:
    job, worker = await running_job(harness.backend)
    before = await harness.now()
    assert await harness.backend.mark_succeeded(job.lease(), {"answer": [4, 2]})
    after = await harness.now()
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.SUCCEEDED
    assert row.result == {"answer": [4, 2]}
    assert between(row.finished_at, before, after)
    assert row.lock_expires_at is None
    assert row.result_expires_at is None
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.attempt, attempt.outcome, attempt.worker_id) == (1, "succeeded", worker)
    assert attempt.started_at == job.started_at
    assert attempt.duration_ms is not None and attempt.duration_ms >= 0
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.kind, last.from_status, last.to_status, last.worker_id) == (
        "state_change",
        JobStatus.RUNNING,
        JobStatus.SUCCEEDED,
        worker,
    )


async def test_results_may_be_any_json_value(harness: Harness) -> None:
    for result in ["text", 3, [1, "two"], None]:
        job, worker = await running_job(harness.backend)
        assert await harness.backend.mark_succeeded(lease(job, worker), result)
        assert (await reload(harness.backend, job.id)).result == result


async def test_a_batch_of_completions_keeps_every_kind_of_json_result(
    harness: Harness,
) -> None:
    """The worker's completer writes results in batches: a list must not become an array."""
    results = ["text", 3, [1, "two"], [[1], [2]], {"a": [1]}, None]
    jobs = [await running_job(harness.backend) for _ in results]
    for (job, worker), result in zip(jobs, results, strict=True):
        success = Success(job.id, job.attempt, jsontext.encode(result))
        assert await harness.backend.mark_succeeded_many(worker, [success]) == {job.id}
        assert (await reload(harness.backend, job.id)).result == result


async def test_a_result_ttl_comes_from_actor_config_then_the_job_then_the_fallback(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.sync_actor_configs(
        [ActorDeclaration("stored", "default", {}, None, None, timedelta(hours=3))], force=False
    )
    cases = [
        ("stored", timedelta(minutes=1), timedelta(hours=3)),
        ("plain", timedelta(minutes=1), timedelta(minutes=1)),
        ("plain", None, timedelta(days=1)),
    ]
    for actor, job_ttl, expected in cases:
        job, _ = await running_job(backend, actor=actor, result_ttl=job_ttl)
        assert await backend.mark_succeeded(
            job.lease(), {"ok": 1}, fallback_result_ttl=timedelta(days=1)
        )
        row = await reload(backend, job.id)
        assert row.finished_at is not None
        assert row.result_expires_at == row.finished_at + expected


async def test_a_cleared_stored_result_ttl_falls_back_to_the_code_literal(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.sync_actor_configs(
        [ActorDeclaration("stored", "default", {}, None, None, timedelta(hours=3))], force=False
    )
    await backend.update_actor_config("stored", result_ttl=None)
    job, _ = await running_job(backend, actor="stored")
    await backend.mark_succeeded(job.lease(), 1, fallback_result_ttl=timedelta(minutes=5))
    row = await reload(backend, job.id)
    assert row.finished_at is not None
    assert row.result_expires_at == row.finished_at + timedelta(minutes=5)


async def test_expired_results_are_cleared_by_the_expiry_sweep(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, result_ttl=timedelta(minutes=10))
    keep, _ = await running_job(harness.backend)
    await harness.backend.mark_succeeded(job.lease(), {"big": "result"})
    await harness.backend.mark_succeeded(keep.lease(), {"kept": True})
    assert await harness.backend.expire_results() == 0
    await harness.travel(601)
    assert await harness.backend.expire_results() == 1
    row = await reload(harness.backend, job.id)
    assert row.result is None and row.result_expires_at is None
    assert row.status is JobStatus.SUCCEEDED
    assert (await reload(harness.backend, keep.id)).result == {"kept": True}


async def test_a_failure_without_retry_fails_the_job(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, None)
    assert row is not None and row == await reload(harness.backend, job.id)
    assert row.status is JobStatus.FAILED
    assert (row.error_class, row.error_message, row.error_traceback) == (
        "ValueError",
        "boom",
        "Traceback: boom",
    )
    assert row.finished_at is not None and row.lock_expires_at is None
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.error_class, attempt.error_message) == (
        "failed",
        "ValueError",
        "boom",
    )


async def test_a_retry_delay_is_counted_on_the_backend_clock(harness: Harness) -> None:
    job, worker = await running_job(harness.backend)
    before = await harness.now()
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(seconds=60))
    after = await harness.now()
    assert row is not None
    assert row.status is JobStatus.SCHEDULED
    assert between(row.scheduled_at, before + timedelta(seconds=60), after + timedelta(seconds=60))
    assert row.locked_by_worker is None and row.lock_expires_at is None
    assert row.error_class == "ValueError"  # the last error stays visible
    assert row.attempt == 1
    [attempt] = await harness.backend.get_attempts(job.id)
    assert attempt.outcome == "retried"
    await harness.travel(58)
    assert await harness.backend.promote_scheduled_jobs() == 0
    await harness.travel(3)
    assert await harness.backend.promote_scheduled_jobs() == 1
    claimed = await harness.backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert [(r.id, r.attempt) for r in claimed] == [(job.id, 2)]


async def test_a_retry_that_would_pass_the_deadline_fails_as_deadline_exceeded(
    harness: Harness,
) -> None:
    job, _ = await running_job(harness.backend, schedule_to_close=timedelta(minutes=1))
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(minutes=5))
    assert row is not None
    assert row.status is JobStatus.FAILED
    assert row.error_class == "DeadlineExceeded"
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.error_class) == ("failed", "ValueError")


async def test_a_retry_inside_the_deadline_is_scheduled(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, schedule_to_close=timedelta(minutes=10))
    row = await harness.backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(minutes=5))
    assert row is not None and row.status is JobStatus.SCHEDULED


async def test_mark_cancelled_ends_a_running_job(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    assert await harness.backend.mark_cancelled(job.lease())
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.CANCELLED and row.finished_at is not None
    [attempt] = await harness.backend.get_attempts(job.id)
    assert attempt.outcome == "cancelled"


async def test_snooze_reschedules_without_consuming_an_attempt(harness: Harness) -> None:
    job, worker = await running_job(harness.backend, max_attempts=1)
    before = await harness.now()
    assert await harness.backend.mark_snoozed(job.lease(), timedelta(seconds=30)) == "scheduled"
    after = await harness.now()
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.SCHEDULED
    assert (row.attempt, row.attempts_used) == (1, 0)
    assert row.metadata["snooze_count"] == 1
    assert between(row.scheduled_at, before + timedelta(seconds=30), after + timedelta(seconds=30))
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.attempt, attempt.outcome) == (1, "snoozed")
    await harness.travel(31)
    await harness.backend.promote_scheduled_jobs()
    [again] = await harness.backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert (again.attempt, again.attempts_used) == (2, 1)  # a body of its own, the budget whole
    assert await harness.backend.mark_snoozed(again.lease(), timedelta(seconds=1)) == "scheduled"
    assert (await reload(harness.backend, job.id)).metadata["snooze_count"] == 2


async def test_snooze_keeps_the_rest_of_the_metadata(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, metadata={"batch_id": "b1"})
    await harness.backend.mark_snoozed(job.lease(), timedelta(seconds=5))
    row = await reload(harness.backend, job.id)
    assert row.metadata == {"batch_id": "b1", "snooze_count": 1}


async def test_snooze_past_the_deadline_fails_the_job(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, schedule_to_close=timedelta(seconds=10))
    assert await harness.backend.mark_snoozed(job.lease(), timedelta(minutes=1)) == "failed"
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.FAILED and row.error_class == "DeadlineExceeded"
    assert row.attempt == 1
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.error_class) == ("failed", "DeadlineExceeded")


async def test_retry_after_consuming_the_budget_keeps_the_attempt(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=3)
    outcome = await harness.backend.mark_retry_after(job.lease(), timedelta(seconds=5))
    assert outcome == "scheduled"
    row = await reload(harness.backend, job.id)
    assert (row.status, row.attempt) == (JobStatus.SCHEDULED, 1)
    [attempt] = await harness.backend.get_attempts(job.id)
    assert attempt.outcome == "retry_after"


async def test_retry_after_without_consuming_the_budget_leaves_the_attempt_uncounted(
    harness: Harness,
) -> None:
    job, _ = await running_job(harness.backend, max_attempts=1)
    outcome = await harness.backend.mark_retry_after(
        job.lease(), timedelta(seconds=5), consume_budget=False
    )
    assert outcome == "scheduled"
    row = await reload(harness.backend, job.id)
    assert (row.attempt, row.attempts_used) == (1, 0)


async def test_retry_after_on_the_last_attempt_fails_with_max_attempts_exceeded(
    harness: Harness,
) -> None:
    job, _ = await running_job(harness.backend, max_attempts=1)
    outcome = await harness.backend.mark_retry_after(job.lease(), timedelta(seconds=5))
    assert outcome == "failed:MaxAttemptsExceeded"
    row = await reload(harness.backend, job.id)
    assert (row.status, row.error_class) == (JobStatus.FAILED, "MaxAttemptsExceeded")


async def test_retry_after_ignores_the_budget_of_indefinite_jobs(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=1, retry_kind="indefinite")
    assert await harness.backend.mark_retry_after(job.lease(), timedelta(1)) == "scheduled"


async def test_retry_after_checks_the_deadline_before_the_budget(harness: Harness) -> None:
    job, _ = await running_job(
        harness.backend, max_attempts=1, schedule_to_close=timedelta(seconds=10)
    )
    outcome = await harness.backend.mark_retry_after(job.lease(), timedelta(minutes=1))
    assert outcome == "failed:DeadlineExceeded"
    assert (await reload(harness.backend, job.id)).error_class == "DeadlineExceeded"


async def test_cancel_escalation_moves_a_requested_cancel_from_phase_one_to_two_once(
    harness: Harness,
) -> None:
    job, worker = await running_job(harness.backend)
    assert await harness.backend.write_cancel_request(job.id, "stop") == "requested"
    assert not await harness.backend.write_cancel_escalation(lease(job, uuid4()))  # not ours
    assert await harness.backend.write_cancel_escalation(job.lease())
    assert not await harness.backend.write_cancel_escalation(job.lease())  # already 2
    row = await reload(harness.backend, job.id)
    assert (row.status, row.cancel_phase) == (JobStatus.RUNNING, 2)
    last = (await harness.backend.get_events(job.id))[-1]
    assert (last.kind, last.from_status, last.to_status, last.worker_id) == (
        "state_change",
        JobStatus.RUNNING,
        JobStatus.RUNNING,
        worker,
    )
    assert last.detail == {"cancel_phase_from": 1, "cancel_phase_to": 2, "reason": "requested"}


async def test_mark_abandoned_needs_a_forced_cancel(harness: Harness) -> None:
    job, worker = await running_job(harness.backend)
    assert not await harness.backend.mark_abandoned(job.lease(), "ignored its cancel")
    await harness.backend.write_cancel_request(job.id, "stop")
    assert not await harness.backend.mark_abandoned(job.lease(), "ignored its cancel")
    await harness.backend.write_cancel_escalation(job.lease())
    assert await harness.backend.mark_abandoned(job.lease(), "ignored its cancel")
    row = await reload(harness.backend, job.id)
    assert row.status is JobStatus.ABANDONED and row.finished_at is not None
    [attempt] = await harness.backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id) == ("abandoned", worker)


async def test_writes_by_another_worker_change_nothing(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    stolen = lease(job, uuid4())
    assert not await harness.backend.mark_succeeded(stolen, None)
    assert await harness.backend.mark_failed_or_retry(stolen, BOOM, None) is None
    assert not await harness.backend.mark_cancelled(stolen)
    assert await harness.backend.mark_snoozed(stolen, timedelta(1)) == "noop"
    assert await harness.backend.mark_retry_after(stolen, timedelta(1)) == "noop"
    assert await reload(harness.backend, job.id) == job
    assert await harness.backend.get_attempts(job.id) == []


async def test_writes_to_an_unknown_job_change_nothing(harness: Harness) -> None:
    missing = Lease(uuid4(), uuid4(), 1)
    assert not await harness.backend.mark_succeeded(missing, None)
    assert await harness.backend.mark_failed_or_retry(missing, BOOM, None) is None
    assert not await harness.backend.mark_cancelled(missing)
    assert not await harness.backend.write_cancel_escalation(missing)
    assert not await harness.backend.mark_abandoned(missing, "gone")
    assert await harness.backend.mark_snoozed(missing, timedelta(1)) == "noop"
    assert await harness.backend.mark_retry_after(missing, timedelta(1)) == "noop"
    assert await harness.backend.mark_started_many(missing.worker_id, []) == set()


async def test_a_late_write_after_a_reclaim_and_redispatch_is_a_no_op(harness: Harness) -> None:
    backend = harness.backend
    job, worker_a = await running_job(backend, lease=timedelta(seconds=30))
    await harness.travel(31)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    worker_b = uuid4()
    [again] = await backend.dispatch_batch(worker_b, [job.queue], 1, LEASE)
    assert (again.id, again.attempt, again.locked_by_worker) == (job.id, 2, worker_b)
    assert not await backend.mark_succeeded(job.lease(), {"late": True})
    assert await backend.mark_failed_or_retry(job.lease(), BOOM, None) is None
    assert job.lease().worker_id == worker_a
    assert (await reload(backend, job.id)).status is JobStatus.RUNNING
    assert await backend.mark_succeeded(again.lease(), {"on_time": True})
    assert (await reload(backend, job.id)).result == {"on_time": True}


async def test_a_success_dates_a_start_the_worker_had_not_recorded_from_ran_for(
    harness: Harness,
) -> None:
    job, _ = await running_job(harness.backend, started=False)
    before = await harness.now()
    assert await harness.backend.mark_succeeded(job.lease(), None, ran_for=90.0)
    after = await harness.now()
    row = await reload(harness.backend, job.id)
    assert between(row.started_at, before - timedelta(seconds=90), after - timedelta(seconds=90))
    [attempt] = await harness.backend.get_attempts(job.id)
    assert attempt.started_at == row.started_at
    assert attempt.duration_ms is not None and attempt.duration_ms >= 90_000


async def test_a_settle_write_keeps_a_start_that_was_recorded(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    assert job.started_at is not None
    assert await harness.backend.mark_failed_or_retry(job.lease(), BOOM, None, ran_for=600.0)
    assert (await reload(harness.backend, job.id)).started_at == job.started_at


async def test_a_succeeded_job_cannot_be_finished_twice(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    assert await harness.backend.mark_succeeded(job.lease(), 1)
    assert not await harness.backend.mark_succeeded(job.lease(), 2)
    assert await harness.backend.mark_failed_or_retry(job.lease(), BOOM, None) is None
    assert (await reload(harness.backend, job.id)).result == 1
    assert len(await harness.backend.get_attempts(job.id)) == 1


async def test_a_pending_job_cannot_be_marked_succeeded(harness: Harness) -> None:
    job = await harness.backend.enqueue(args())
    assert not await harness.backend.mark_succeeded(Lease(job.id, uuid4(), 0), None)
    assert (await reload(harness.backend, job.id)).status is JobStatus.PENDING


UNSTORABLE = [
    pytest.param(float("nan"), "Out of range float", id="nan"),
    pytest.param({"x": float("inf")}, "Out of range float", id="infinity"),
    pytest.param({"text": "a\x00b"}, "NUL character", id="nul-in-a-string"),
    pytest.param(["ok", {"deep": ["\x00"]}], "NUL character", id="nul-deep-inside"),
]


@pytest.mark.parametrize(("result", "reason"), UNSTORABLE)
async def test_a_result_that_cannot_be_stored_is_refused_before_anything_is_written(
    harness: Harness, result: object, reason: str
) -> None:
    job, _ = await running_job(harness.backend)
    with pytest.raises(jsontext.UnstorableValueError, match=f"not storable as JSON: .*{reason}"):
        await harness.backend.mark_succeeded(job.lease(), result)
    assert await reload(harness.backend, job.id) == job
    assert await harness.backend.get_attempts(job.id) == []


async def test_an_escaped_backslash_before_u0000_is_an_ordinary_string(harness: Harness) -> None:
    job, _ = await running_job(harness.backend)
    assert await harness.backend.mark_succeeded(job.lease(), {"text": "\\u0000"})
    assert (await reload(harness.backend, job.id)).result == {"text": "\\u0000"}
