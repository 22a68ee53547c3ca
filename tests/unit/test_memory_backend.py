"""What only the in-memory backend has: simulated transactions, in-process wake events, the
injected clock, snapshot isolation and the bookkeeping a prune clears. Behaviour shared with
Postgres lives in tests/conformance.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from taskq_core import jsontext
from taskq_core.backend import protocol
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.memory.settle import Ending, decide
from taskq_core.backend.memory.store import JobRecord
from taskq_core.backend.protocol import (
    Backend,
    EnqueueArgs,
    ErrorInfo,
    JobFilter,
    PrunePolicy,
    RetryKind,
    Start,
)
from taskq_core.clock import FakeClock
from taskq_core.statemachine import JobStatus

LEASE = timedelta(seconds=30)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


async def _all_jobs(backend: InMemoryBackend) -> list[protocol.JobRow]:
    return await backend.list_jobs(JobFilter(limit=None))


async def _status(backend: InMemoryBackend, job_id: UUID) -> JobStatus:
    row = await backend.get(job_id)
    assert row is not None
    return row.status


async def _running_job(
    backend: InMemoryBackend, args: EnqueueArgs | None = None
) -> tuple[UUID, UUID]:
    """Enqueue one job, dispatch it, record its start, and return (job id, worker id)."""
    worker = uuid4()
    job = await backend.enqueue(args or EnqueueArgs("resize"))
    claimed = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert [row.id for row in claimed] == [job.id]
    assert await backend.mark_started_many(worker, [Start(job.id, claimed[0].attempt)])
    return job.id, worker


# --- the protocol seam ---------------------------------------------------------------------
def test_backend_satisfies_the_protocol_and_declares_its_version(
    backend: InMemoryBackend,
) -> None:
    assert isinstance(backend, Backend)
    assert InMemoryBackend.BACKEND_PROTOCOL_VERSION == protocol.BACKEND_PROTOCOL_VERSION
    assert InMemoryBackend.supports_transactional_simulation is True


# --- simulated transactions ----------------------------------------------------------------
async def test_transactional_enqueue_becomes_visible_only_on_clean_exit(
    backend: InMemoryBackend,
) -> None:
    async with backend.transaction() as tx:
        row = await backend.enqueue(EnqueueArgs("resize"), connection=tx)
        await backend.enqueue_batch([EnqueueArgs("resize"), EnqueueArgs("resize")], connection=tx)
        assert await backend.enqueue_batch_fast([EnqueueArgs("resize")], connection=tx) == 1
        assert await backend.get(row.id) is None
        assert await _all_jobs(backend) == []
    assert len(await _all_jobs(backend)) == 4
    assert await backend.get(row.id) == row


async def test_transactional_enqueue_rolled_back_leaves_no_job(backend: InMemoryBackend) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with backend.transaction() as tx:
            await backend.enqueue(EnqueueArgs("resize"), connection=tx)
            raise RuntimeError("boom")
    assert await _all_jobs(backend) == []
    assert await backend.dispatch_batch(uuid4(), ["default"], 10, LEASE) == []


async def test_closed_transaction_handle_is_rejected(backend: InMemoryBackend) -> None:
    async with backend.transaction() as tx:
        pass
    with pytest.raises(ValueError, match="already closed"):
        await backend.enqueue(EnqueueArgs("resize"), connection=tx)


async def test_handle_of_another_backend_is_rejected(backend: InMemoryBackend) -> None:
    other = InMemoryBackend(clock=FakeClock())
    async with other.transaction() as foreign:
        with pytest.raises(ValueError, match="another backend"):
            await backend.enqueue(EnqueueArgs("resize"), connection=foreign)
    assert await _all_jobs(other) == []


async def test_a_non_handle_connection_is_rejected(backend: InMemoryBackend) -> None:
    with pytest.raises(TypeError, match="transaction"):
        await backend.enqueue(EnqueueArgs("resize"), connection=object())


async def test_an_invalid_batch_item_inserts_nothing(backend: InMemoryBackend) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        await backend.enqueue_batch([EnqueueArgs("resize"), EnqueueArgs("resize", max_attempts=0)])
    assert await _all_jobs(backend) == []


async def test_commit_wakes_subscribers_once_the_jobs_exist(backend: InMemoryBackend) -> None:
    async with backend.subscribe_wake() as wake:
        async with backend.transaction() as tx:
            await backend.enqueue(EnqueueArgs("resize"), connection=tx)
            assert not wake.is_set()
        assert wake.is_set()


# --- wake subscriptions --------------------------------------------------------------------
async def test_wake_is_set_for_pending_enqueue_but_not_for_scheduled(
    backend: InMemoryBackend,
) -> None:
    async with backend.subscribe_wake() as wake:
        await backend.enqueue(EnqueueArgs("resize", delay=timedelta(seconds=10)))
        assert not wake.is_set()
        await backend.enqueue(EnqueueArgs("resize"))
        assert wake.is_set()


async def test_wake_is_set_when_scheduled_jobs_become_due(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    await backend.enqueue(EnqueueArgs("resize", delay=timedelta(seconds=10)))
    async with backend.subscribe_wake() as wake:
        assert await backend.promote_scheduled_jobs() == 0
        assert not wake.is_set()
        clock.advance(10)
        assert await backend.promote_scheduled_jobs() == 1
        assert wake.is_set()


async def test_wake_is_set_on_reclaim_and_on_operator_retry(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job_id, _ = await _running_job(backend, EnqueueArgs("resize", max_attempts=1))
    clock.advance(LEASE.total_seconds() + 1)
    async with backend.subscribe_wake() as wake:
        assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
        assert wake.is_set()
    assert await _status(backend, job_id) is JobStatus.CRASHED
    async with backend.subscribe_wake() as wake:
        assert await backend.retry_job(job_id)
        assert wake.is_set()


async def test_every_subscriber_gets_its_own_event_and_leaves_on_exit(
    backend: InMemoryBackend,
) -> None:
    async with backend.subscribe_wake() as first, backend.subscribe_wake() as second:
        assert first is not second
        await backend.enqueue(EnqueueArgs("resize"))
        assert first.is_set() and second.is_set()
    async with backend.subscribe_wake() as fresh:
        pass
    await backend.enqueue(EnqueueArgs("resize"))
    assert not fresh.is_set()


async def test_a_waiting_consumer_is_woken_by_enqueue(backend: InMemoryBackend) -> None:
    async with backend.subscribe_wake() as wake:
        waiter = asyncio.create_task(wake.wait())
        await asyncio.sleep(0)
        await backend.enqueue(EnqueueArgs("resize"))
        async with asyncio.timeout(1):
            await waiter


async def test_cancel_wake_fires_only_for_running_jobs(backend: InMemoryBackend) -> None:
    waiting = await backend.enqueue(EnqueueArgs("resize", queue="other"))
    running_id, worker = await _running_job(backend)
    async with backend.subscribe_cancel_wake() as cancel_wake:
        assert await backend.write_cancel_request(waiting.id, "stop") == "cancelled"
        assert not cancel_wake.is_set()
        assert await backend.write_cancel_request(running_id, "stop") == "requested"
        assert cancel_wake.is_set()
    assert [flag.job_id for flag in await backend.poll_cancel_flags(worker)] == [running_id]


# --- the injected clock --------------------------------------------------------------------
async def test_every_timestamp_comes_from_the_injected_clock(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    start = clock.now()
    row = await backend.enqueue(
        EnqueueArgs("resize", delay=timedelta(seconds=5), schedule_to_close=timedelta(hours=1))
    )
    assert row.created_at == row.updated_at == start
    assert row.scheduled_at == start + timedelta(seconds=5)
    assert row.schedule_to_close == start + timedelta(hours=1)
    clock.advance(5)
    await backend.promote_scheduled_jobs()
    worker = uuid4()
    [claimed] = await backend.dispatch_batch(worker, ["default"], 1, LEASE)
    assert claimed.claimed_at == start + timedelta(seconds=5)
    assert claimed.lock_expires_at == start + timedelta(seconds=5) + LEASE
    clock.advance(2)
    assert await backend.mark_started_many(worker, [Start(claimed.id, 1, ran_for=0.5)])
    started = await backend.get(claimed.id)
    assert started is not None
    assert started.started_at == start + timedelta(seconds=6.5)


async def test_leases_expire_only_when_the_injected_clock_moves(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job_id, _ = await _running_job(backend)
    await asyncio.sleep(0.01)  # real time passing changes nothing
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 0
    clock.advance(LEASE)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 0  # not yet past
    clock.advance(0.001)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    assert await _status(backend, job_id) is JobStatus.PENDING


async def test_default_clock_is_the_system_clock() -> None:
    backend = InMemoryBackend()
    before = datetime.now(UTC)
    row = await backend.enqueue(EnqueueArgs("resize"))
    assert before <= row.created_at <= datetime.now(UTC)


# --- snapshots -----------------------------------------------------------------------------
async def test_returned_rows_are_frozen_snapshots(backend: InMemoryBackend) -> None:
    row = await backend.enqueue(EnqueueArgs("resize", {"size": [1, 2]}, metadata={"a": 1}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = JobStatus.FAILED  # type: ignore[misc]
    row.payload["size"].append(3)
    row.metadata["a"] = 2
    stored = await backend.get(row.id)
    assert stored is not None
    assert stored.payload == {"size": [1, 2]}
    assert stored.metadata == {"a": 1}


async def test_the_caller_keeps_ownership_of_what_it_passes_in(backend: InMemoryBackend) -> None:
    payload: dict[str, object] = {"nested": {"k": "v"}}
    row = await backend.enqueue(EnqueueArgs("resize", payload))
    payload["nested"] = "changed"
    worker = uuid4()
    [claimed] = await backend.dispatch_batch(worker, ["default"], 1, LEASE)
    result = {"out": [1]}
    assert await backend.mark_succeeded(claimed.lease(), result)
    result["out"].append(2)
    stored = await backend.get(row.id)
    assert stored is not None
    assert stored.payload == {"nested": {"k": "v"}}
    assert stored.result == {"out": [1]}


async def test_snapshots_do_not_follow_later_writes(backend: InMemoryBackend) -> None:
    before = await backend.enqueue(EnqueueArgs("resize"))
    await backend.dispatch_batch(uuid4(), ["default"], 1, LEASE)
    assert before.status is JobStatus.PENDING
    assert before.attempt == 0


async def test_event_details_are_copies(backend: InMemoryBackend, clock: FakeClock) -> None:
    job_id, _ = await _running_job(backend, EnqueueArgs("resize", max_attempts=1))
    clock.advance(60)
    await backend.reclaim_expired_leases(timedelta(0), timedelta(0))
    clock.advance(5)
    [event] = await backend.poll_reclaim_events(0)
    event.detail["reason"] = "tampered"
    [again] = await backend.poll_reclaim_events(0)
    assert again.detail["reason"] == "lock_expired"
    assert again.job_id == job_id


async def test_json_columns_follow_jsonb_rules(backend: InMemoryBackend) -> None:
    row = await backend.enqueue(EnqueueArgs("resize", {"pair": (1, 2)}))
    assert row.payload == {"pair": [1, 2]}
    with pytest.raises(ValueError):
        await backend.enqueue(EnqueueArgs("resize", {"x": float("nan")}))
    # A type JSON does not know is unstorable too (a ValueError, as Postgres raises it).
    with pytest.raises(jsontext.UnstorableValueError, match="datetime is not JSON serializable"):
        await backend.enqueue(EnqueueArgs("resize", {"when": datetime.now(UTC)}))


# --- dispatch reads no windows ------------------------------------------------------------
async def test_dispatch_looks_past_any_number_of_held_back_jobs(clock: FakeClock) -> None:
    """PostgreSQL reads bounded candidate windows; memory claims every due job the rules
    allow, however deep the jobs held back ahead of it."""
    backend = InMemoryBackend(clock=clock)
    await backend.enqueue(EnqueueArgs("resize", identity_key="same"))
    [held] = await backend.dispatch_batch(uuid4(), ["default"], 1, LEASE)
    await backend.enqueue_batch([EnqueueArgs("resize", identity_key="same")] * 100)
    await backend.enqueue_batch([EnqueueArgs("capped") for _ in range(100)])
    await backend.sync_actor_configs(
        [protocol.ActorDeclaration("capped", "default", {}, 0, None, None)], force=False
    )
    clock.advance(1)
    free = await backend.enqueue(EnqueueArgs("resize"))
    claimed = await backend.dispatch_batch(uuid4(), ["default"], 1, LEASE)
    assert [row.id for row in claimed] == [free.id]
    assert held.id not in {row.id for row in claimed}


# --- the settle rules, one pure decision ---------------------------------------------------
NOW = datetime(2026, 1, 1, tzinfo=UTC)
BOOM = ErrorInfo("ValueError", "boom", "Traceback: boom")
LATER = NOW + timedelta(seconds=5)


def _record(
    *,
    attempt: int = 1,
    max_attempts: int = 3,
    retry_kind: RetryKind = "transient",
    deadline: datetime | None = None,
    cancel_requested: bool = False,
) -> JobRecord:
    return JobRecord(
        id=uuid4(),
        actor="resize",
        queue="default",
        payload={},
        status=JobStatus.RUNNING,
        priority=0,
        scheduled_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        retry_kind=retry_kind,
        max_attempts=max_attempts,
        identity_key=None,
        fairness_key=None,
        schedule_to_close=deadline,
        result_ttl=None,
        metadata={},
        trace_id=None,
        span_id=None,
        attempt=attempt,
        cancel_requested_at=NOW if cancel_requested else None,
    )


def test_a_requested_cancel_wins_over_the_deadline_and_the_budget() -> None:
    job = _record(attempt=3, max_attempts=3, deadline=NOW, cancel_requested=True)
    retry = decide(job, Ending("retried", BOOM, LATER), NOW)
    assert (retry.status, retry.attempt_outcome, retry.job_error) == (
        JobStatus.CANCELLED,
        "failed",  # the attempt keeps the actor's error
        BOOM,
    )
    later = decide(job, Ending("retry_after", None, LATER), NOW)
    assert (later.status, later.attempt_outcome) == (JobStatus.CANCELLED, "cancelled")


def test_the_deadline_is_checked_before_the_attempt_budget() -> None:
    job = _record(attempt=3, max_attempts=3, deadline=NOW + timedelta(seconds=1))
    plan = decide(job, Ending("retry_after", None, LATER), NOW)
    assert plan.status is JobStatus.FAILED
    assert plan.job_error is not None and plan.job_error.error_class == "DeadlineExceeded"
    retry = decide(job, Ending("retried", BOOM, LATER), NOW)
    assert (retry.attempt_error, retry.job_error is not None) == (BOOM, True)
    assert retry.job_error is not None and "last error: boom" in retry.job_error.message


@pytest.mark.parametrize(
    ("counts", "retry_kind", "status"),
    [
        (True, "transient", JobStatus.FAILED),
        (False, "transient", JobStatus.SCHEDULED),
        (True, "indefinite", JobStatus.SCHEDULED),
    ],
)
def test_a_retry_after_spends_the_budget_of_transient_jobs_only(
    counts: bool, retry_kind: RetryKind, status: JobStatus
) -> None:
    job = _record(attempt=3, max_attempts=3, retry_kind=retry_kind)
    plan = decide(job, Ending("retry_after", None, LATER, counts=counts), NOW)
    assert plan.status is status
    assert plan.counts is (counts or status is JobStatus.FAILED)


@pytest.mark.parametrize(
    ("job", "started", "status", "attempt_row"),
    [
        (_record(), False, JobStatus.PENDING, None),
        (_record(cancel_requested=True), False, JobStatus.CANCELLED, None),
        (_record(cancel_requested=True), True, JobStatus.CANCELLED, "crashed"),
        (_record(attempt=1, max_attempts=2), True, JobStatus.SCHEDULED, "crashed"),
        (_record(attempt=2, max_attempts=2), True, JobStatus.CRASHED, "crashed"),
        (_record(retry_kind="non_retryable"), True, JobStatus.CRASHED, "crashed"),
        (_record(retry_kind="indefinite", deadline=NOW), True, JobStatus.CRASHED, "crashed"),
    ],
)
def test_a_job_given_back(
    job: JobRecord, started: bool, status: JobStatus, attempt_row: str | None
) -> None:
    plan = decide(job, Ending("crashed", BOOM, LATER, started=started), NOW)
    assert (plan.status, plan.attempt_outcome, plan.given_back) == (status, attempt_row, True)
    assert plan.counts is started  # a body that never ran gives its attempt back
    assert plan.run_at == (LATER if status is JobStatus.SCHEDULED else None)
    # The row keeps a crash's error without its traceback; the attempt row keeps it whole.
    assert plan.job_error == (ErrorInfo("ValueError", "boom") if started else None)


# --- retention: a pruned job leaves every table, and the archive is its own copy ------------
_PRUNE_CRASHED = PrunePolicy(
    retention={JobStatus.CRASHED: timedelta(seconds=1)}, archive_for=timedelta(hours=1)
)


async def _crashed_job(backend: InMemoryBackend, clock: FakeClock, **fields: Any) -> UUID:
    """A job whose only attempt crashed when its lease expired: it has a 'reclaim' event."""
    job_id, _ = await _running_job(backend, EnqueueArgs("resize", max_attempts=1, **fields))
    clock.advance(LEASE + timedelta(seconds=1))
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    assert await _status(backend, job_id) is JobStatus.CRASHED
    return job_id


async def test_a_pruned_jobs_reclaim_events_leave_the_reclaim_feed(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job_id = await _crashed_job(backend, clock)
    clock.advance(timedelta(minutes=1))
    [event] = await backend.poll_reclaim_events(0)
    assert event.job_id == job_id
    assert (await backend.prune_jobs(_PRUNE_CRASHED)).total == 1
    assert await backend.poll_reclaim_events(0) == []
    assert await backend.get_events(job_id) == []
    assert await backend.count_jobs(JobFilter(limit=None)) == 0


async def test_two_prunes_at_once_move_each_job_once(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    ids = [await _crashed_job(backend, clock) for _ in range(5)]
    clock.advance(timedelta(minutes=1))
    small_batches = dataclasses.replace(_PRUNE_CRASHED, batch_size=1)
    # Each prune yields between its batches, so the two interleave as two leaders would.
    first, second = await asyncio.gather(
        backend.prune_jobs(small_batches), backend.prune_jobs(small_batches)
    )
    assert first.total + second.total == 5
    assert first.total > 0 and second.total > 0
    for job_id in ids:
        archived = await backend.get_archived_job(job_id)
        assert archived is not None
        assert len(await backend.get_archived_attempts(job_id)) == 1


async def test_archived_rows_are_frozen_snapshots(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job_id = await _crashed_job(backend, clock, metadata={"a": [1]})
    clock.advance(timedelta(minutes=1))
    assert (await backend.prune_jobs(_PRUNE_CRASHED)).total == 1
    archived = await backend.get_archived_job(job_id)
    assert archived is not None
    archived.job.metadata["a"].append(2)
    (await backend.get_archived_attempts(job_id)).clear()
    again = await backend.get_archived_job(job_id)
    assert again is not None
    assert again.job.metadata == {"a": [1]}
    assert len(await backend.get_archived_attempts(job_id)) == 1
