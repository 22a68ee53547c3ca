"""An operator's fixes for stuck work, on both backends: requeue or fail a running job (fenced
like a worker's write: the worker that held it loses its lease), move waiting jobs to another
queue, purge jobs by filter; and the audit trail each write leaves (who and why in the job
events, or in the operator log when no job is left to carry it)."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import Backend, JobFilter, Lease
from taskq_core.backend.protocol.admin import (
    OPERATOR_FAILED,
    OPERATOR_REQUEUED,
    Audit,
)
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import (
    BOOM,
    LEASE,
    args,
    cap_actor,
    job_in,
    new_queue,
    reload,
    running_job,
    wait_set,
)

AUDIT = Audit(by="alice@ops-1", reason="worker wedged on a lock")


async def assert_lease_lost(backend: Backend, old: Lease) -> None:
    """The worker that ran ``old`` is told nothing is its own any more: a late success writes
    nothing and its heartbeat no longer holds the job."""
    before = await reload(backend, old.job_id)
    assert await backend.mark_succeeded(old, {"late": True}) is False
    beat = await backend.heartbeat(old.worker_id, LEASE, [old])
    assert old.job_id not in beat.held
    after = await reload(backend, old.job_id)
    assert (after.status, after.result, after.attempt) == (
        before.status,
        before.result,
        before.attempt,
    )


# --- requeue ---------------------------------------------------------------------------------
async def test_requeue_takes_a_started_job_from_its_worker_and_pends_it(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    old = job.lease()

    result = await backend.end_running_job(job.id, "requeue", AUDIT)

    assert result.settled
    assert result.job is not None and result.job.status is JobStatus.PENDING
    row = await reload(backend, job.id)
    assert row.status is JobStatus.PENDING
    assert row.locked_by_worker is None and row.lock_expires_at is None
    assert row.attempt == 1  # the interrupted attempt counts, as a reclaim counts it
    assert row.error_class == OPERATOR_REQUEUED
    assert row.error_message == "requeued by alice@ops-1: worker wedged on a lock"
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id, attempt.error_class) == (
        "crashed",
        worker,
        OPERATOR_REQUEUED,
    )
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.from_status, event.to_status) == (
        "reclaim",
        JobStatus.RUNNING,
        JobStatus.PENDING,
    )
    assert event.detail["reason"] == "operator_requeue"
    assert event.detail["by"] == "alice@ops-1"
    assert event.detail["why"] == "worker wedged on a lock"
    assert event.detail["worker_id"] == str(worker)
    await assert_lease_lost(backend, old)

    # It runs again, on any worker, as its next attempt.
    [again] = await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    assert (again.id, again.attempt) == (job.id, 2)


async def test_requeue_on_the_last_attempt_ends_crashed_as_a_reclaim_would(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=1)

    result = await backend.end_running_job(job.id, "requeue", AUDIT)

    assert result.settled
    row = await reload(backend, job.id)
    assert row.status is JobStatus.CRASHED
    assert row.error_class == OPERATOR_REQUEUED
    await assert_lease_lost(backend, job.lease())


async def test_requeue_of_a_claimed_job_uses_none_of_its_budget(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=False)

    assert (await backend.end_running_job(job.id, "requeue", AUDIT)).settled

    row = await reload(backend, job.id)
    assert (row.status, row.attempts_used, row.locked_by_worker) == (JobStatus.PENDING, 0, None)
    assert await backend.get_attempts(job.id) == []  # no body ran: no attempt row
    event = (await backend.get_events(job.id))[-1]
    assert event.detail["started"] is False and event.detail["by"] == "alice@ops-1"
    await assert_lease_lost(backend, job.lease())


async def test_requeue_with_a_cancel_in_flight_ends_cancelled(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert await backend.write_cancel_request(job.id, "stop") == "requested"

    assert (await backend.end_running_job(job.id, "requeue", AUDIT)).settled

    assert (await reload(backend, job.id)).status is JobStatus.CANCELLED


# --- fail ------------------------------------------------------------------------------------
async def test_fail_ends_a_running_job_failed_and_fences_its_worker(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=5)
    old = job.lease()

    result = await backend.end_running_job(job.id, "fail", AUDIT)

    assert result.settled
    assert result.job is not None and result.job.status is JobStatus.FAILED
    row = await reload(backend, job.id)
    assert row.status is JobStatus.FAILED and row.finished_at is not None
    assert row.error_class == OPERATOR_FAILED
    assert row.error_message == "failed by alice@ops-1: worker wedged on a lock"
    [attempt] = await backend.get_attempts(job.id)
    assert (attempt.outcome, attempt.worker_id) == ("failed", worker)
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.to_status) == ("state_change", JobStatus.FAILED)
    assert event.detail == {
        "reason": "operator_fail",
        "by": "alice@ops-1",
        "why": "worker wedged on a lock",
    }
    await assert_lease_lost(backend, old)
    # A failed job is re-pended by an operator retry, as any failed job is.
    assert await backend.retry_where(JobFilter(ids=[job.id]), audit=AUDIT) == 1


async def test_a_job_that_is_not_running_is_left_as_it_is(harness: Harness) -> None:
    backend = harness.backend
    for status in (JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.SUCCEEDED):
        job, _ = await job_in(harness, status)
        for end in ("requeue", "fail"):
            result = await backend.end_running_job(job.id, end, AUDIT)  # type: ignore[arg-type]
            assert not result.settled
            assert result.job == job
    missing = await backend.end_running_job(uuid4(), "fail", AUDIT)
    assert missing.job is None and not missing.settled


async def test_a_worker_that_settles_first_wins(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    assert await backend.mark_succeeded(job.lease(), {"ok": True})

    result = await backend.end_running_job(job.id, "fail", AUDIT)

    assert not result.settled
    assert result.job is not None and result.job.status is JobStatus.SUCCEEDED


# --- move ------------------------------------------------------------------------------------
async def test_move_takes_waiting_jobs_to_another_queue_and_leaves_the_rest(
    harness: Harness,
) -> None:
    backend = harness.backend
    source, target = new_queue(), new_queue()
    held, _ = await running_job(backend, queue=source)
    pending = await backend.enqueue(args(queue=source, priority=5))
    late = await backend.enqueue(args(queue=source))
    scheduled = await backend.enqueue(args(queue=source, delay=timedelta(hours=1)))
    other_actor = await backend.enqueue(args("other", queue=source))

    moved = await backend.move_where(
        JobFilter(queue=source, actor="work", limit=None), target, AUDIT
    )

    assert moved == 3
    for job in (pending, late, scheduled):
        row = await reload(backend, job.id)
        assert row.queue == target
        assert (row.status, row.scheduled_at, row.priority) == (
            job.status,
            job.scheduled_at,
            job.priority,
        )
        event = (await backend.get_events(job.id))[-1]
        assert (event.kind, event.from_status, event.to_status) == (
            "queue_move",
            job.status,
            job.status,
        )
        assert event.detail == {
            "from_queue": source,
            "to_queue": target,
            "by": "alice@ops-1",
            "why": "worker wedged on a lock",
        }
    assert (await reload(backend, other_actor.id)).queue == source
    assert (await reload(backend, held.id)).queue == source  # a worker holds it
    # A worker of the new queue takes the moved pending jobs, priority first.
    taken = await backend.dispatch_batch(uuid4(), [target], 10, LEASE)
    assert [j.id for j in taken] == [pending.id, late.id]


async def test_move_wakes_the_workers(harness: Harness) -> None:
    backend = harness.backend
    job = await backend.enqueue(args(queue=new_queue()))
    async with backend.subscribe_wake() as woken:
        woken.clear()
        assert await backend.move_where(JobFilter(ids=[job.id]), new_queue(), AUDIT) == 1
        await wait_set(woken)


# --- purge -----------------------------------------------------------------------------------
async def test_purge_deletes_matches_with_their_history_and_refuses_running_ones(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue = new_queue()
    running, _ = await running_job(backend, queue=queue)
    failed, _ = await job_in(harness, JobStatus.FAILED, queue=queue)
    succeeded, _ = await job_in(harness, JobStatus.SUCCEEDED, queue=queue)
    pending = await backend.enqueue(args(queue=queue))
    elsewhere = await backend.enqueue(args(queue=new_queue()))

    result = await backend.purge_where(JobFilter(queue=queue, limit=None), AUDIT)

    assert result.deleted == {
        JobStatus.PENDING: 1,
        JobStatus.SUCCEEDED: 1,
        JobStatus.FAILED: 1,
    }
    assert result.total == 3 and result.running_skipped == 1
    for gone in (failed, succeeded, pending):
        assert await backend.get(gone.id) is None
        assert await backend.get_events(gone.id) == []
        assert await backend.get_attempts(gone.id) == []
    assert (await reload(backend, running.id)).status is JobStatus.RUNNING
    assert await backend.get(elsewhere.id) is not None
    [entry] = await backend.list_operator_log()
    assert (entry.action, entry.target, entry.by, entry.reason) == (
        "purge",
        None,
        "alice@ops-1",
        "worker wedged on a lock",
    )
    assert entry.detail["deleted"] == {"pending": 1, "succeeded": 1, "failed": 1}
    assert entry.detail["running_skipped"] == 1
    assert entry.detail["filter"]["queue"] == queue


async def test_purge_by_status_keeps_the_other_statuses(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    failed, _ = await job_in(harness, JobStatus.FAILED, queue=queue)
    kept = await backend.enqueue(args(queue=queue))

    result = await backend.purge_where(
        JobFilter(status=JobStatus.FAILED, queue=queue, limit=None), Audit("bob@h")
    )

    assert result.deleted == {JobStatus.FAILED: 1} and result.running_skipped == 0
    assert await backend.get(failed.id) is None
    assert await backend.get(kept.id) is not None


# --- the audit trail of the other operator writes ------------------------------------------
async def test_cancel_and_retry_events_carry_who_and_why(harness: Harness) -> None:
    backend = harness.backend
    job = await backend.enqueue(args(queue=new_queue()))
    running, _ = await running_job(backend)

    cancelled = await backend.cancel_where(
        JobFilter(ids=[job.id, running.id]), "bad input", audit=Audit("carol@ops-2", "bad input")
    )
    assert (cancelled.cancelled, cancelled.requested) == (1, 1)
    for ident in (job.id, running.id):
        event = (await backend.get_events(ident))[-1]
        assert event.kind == "cancel_request"
        assert event.detail["by"] == "carol@ops-2" and event.detail["reason"] == "bad input"

    assert await backend.retry_where(JobFilter(ids=[job.id]), audit=Audit("dave@ops-3")) == 1
    event = (await backend.get_events(job.id))[-1]
    assert event.detail == {"reason": "operator_retry", "by": "dave@ops-3"}


async def test_unaudited_writes_keep_their_events_as_they_were(harness: Harness) -> None:
    backend = harness.backend
    job = await backend.enqueue(args(queue=new_queue()))
    await backend.cancel_where(JobFilter(ids=[job.id]), "x")
    assert (await backend.get_events(job.id))[-1].detail == {"reason": "x"}


async def test_an_audited_write_does_not_stamp_other_jobs_events(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend)
    other, _ = await running_job(backend)
    await backend.end_running_job(job.id, "fail", AUDIT)
    assert await backend.mark_failed_or_retry(other.lease(), BOOM, None) is not None
    assert "by" not in (await backend.get_events(other.id))[-1].detail


async def test_actor_config_changes_are_logged_with_who_why_and_what(harness: Harness) -> None:
    backend = harness.backend
    actor = f"a_{uuid4().hex[:8]}"
    await cap_actor(backend, actor, 4)

    row = await backend.update_actor_config(
        actor,
        max_concurrent=2,
        result_ttl=timedelta(minutes=5),
        audit=Audit("erin@ops-4", "db is struggling"),
    )

    assert row is not None and row.max_concurrent == 2
    [entry] = await backend.list_operator_log(target=actor)
    assert (entry.action, entry.target, entry.by, entry.reason) == (
        "actor_config_set",
        actor,
        "erin@ops-4",
        "db is struggling",
    )
    assert entry.detail == {
        "changed": {
            "max_concurrent": {"from": 4, "to": 2},
            "result_ttl": {"from": None, "to": 300.0},
        }
    }
    assert await backend.list_operator_log(target="nobody") == []
    assert await backend.update_actor_config("nobody", max_concurrent=1, audit=AUDIT) is None


async def test_queue_changes_are_logged_with_who_why_and_what(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.update_queue(queue, paused=True, audit=Audit("frank@ops-5", "maintenance"))
    await backend.update_queue(queue, paused=False, max_concurrent=2, audit=Audit("frank@ops-5"))
    await backend.update_queue(queue, mode="round_robin")  # no audit: not logged

    resumed, paused = await backend.list_operator_log(action="queue_update", target=queue)
    assert (paused.by, paused.reason, paused.detail) == (
        "frank@ops-5",
        "maintenance",
        {"changed": {"paused": {"from": False, "to": True}}},
    )
    assert resumed.reason is None
    assert resumed.detail == {
        "changed": {
            "max_concurrent": {"from": None, "to": 2},
            "paused": {"from": True, "to": False},
        }
    }
    assert await backend.list_operator_log(action="actor_config_set", target=queue) == []
