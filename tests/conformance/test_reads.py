"""Reads: get, list_jobs under every JobFilter rule, counts, attempts and events."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import JobFilter, QueueStatusCount, Start
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, job_in

# --- JobFilter construction (the same for every backend) -----------------------------------


def test_a_filter_accepts_one_status_or_a_sequence() -> None:
    assert JobFilter(status="failed").statuses() == {JobStatus.FAILED}
    assert JobFilter(status=JobStatus.RUNNING).statuses() == {JobStatus.RUNNING}
    assert JobFilter(status=["pending", JobStatus.RUNNING]).statuses() == {
        JobStatus.PENDING,
        JobStatus.RUNNING,
    }
    assert JobFilter().statuses() is None


def test_an_empty_status_sequence_allows_no_status() -> None:
    assert JobFilter(status=[]).statuses() == frozenset()


def test_an_unknown_status_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown status 'done'"):
        JobFilter(status="done")
    with pytest.raises(ValueError, match="unknown status"):
        JobFilter(status=["pending", "finished"])


def test_status_and_active_are_mutually_exclusive() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        JobFilter(status="pending", active=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        JobFilter(status=[], active=False)


def test_active_selects_statuses_by_terminality() -> None:
    assert JobFilter(active=True).statuses() == ACTIVE_STATUSES
    assert JobFilter(active=False).statuses() == TERMINAL_STATUSES


def test_a_negative_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="limit"):
        JobFilter(limit=-1)


# --- reads against a backend ----------------------------------------------------------------


async def test_get_returns_none_for_an_unknown_job(harness: Harness) -> None:
    assert await harness.backend.get(uuid4()) is None
    assert await harness.backend.get_attempts(uuid4()) == []
    assert await harness.backend.get_events(uuid4()) == []


async def one_job_per_status(harness: Harness) -> dict[JobStatus, UUID]:
    made = {}
    for status in JobStatus:  # the waiting step waits for the pending job, made before it
        fields = {"after": made[JobStatus.PENDING]} if status is JobStatus.WAITING else {}
        made[status] = (await job_in(harness, status, **fields))[0].id
    return made


async def test_list_jobs_filters_by_one_status_or_several(harness: Harness) -> None:
    made = await one_job_per_status(harness)
    backend = harness.backend
    [failed] = await backend.list_jobs(JobFilter(status="failed"))
    assert failed.id == made[JobStatus.FAILED]
    several = await backend.list_jobs(JobFilter(status=["pending", "crashed"]))
    assert {row.id for row in several} == {made[JobStatus.PENDING], made[JobStatus.CRASHED]}


async def test_list_jobs_with_an_empty_status_list_matches_nothing(harness: Harness) -> None:
    await one_job_per_status(harness)
    assert await harness.backend.list_jobs(JobFilter(status=[])) == []


async def test_list_jobs_active_true_and_false_split_by_terminality(harness: Harness) -> None:
    made = await one_job_per_status(harness)
    active = await harness.backend.list_jobs(JobFilter(active=True))
    finished = await harness.backend.list_jobs(JobFilter(active=False))
    assert {row.id for row in active} == {made[s] for s in ACTIVE_STATUSES}
    assert {row.id for row in finished} == {made[s] for s in TERMINAL_STATUSES}
    everything = await harness.backend.list_jobs(JobFilter())
    assert len(everything) == len(JobStatus)


async def test_list_jobs_filters_by_queue_actor_and_ids(harness: Harness) -> None:
    backend = harness.backend
    a = await backend.enqueue(args(actor="a", queue="x"))
    b = await backend.enqueue(args(actor="b", queue="x"))
    c = await backend.enqueue(args(actor="a", queue="y"))
    assert {r.id for r in await backend.list_jobs(JobFilter(queue="x"))} == {a.id, b.id}
    assert {r.id for r in await backend.list_jobs(JobFilter(actor="a"))} == {a.id, c.id}
    assert [r.id for r in await backend.list_jobs(JobFilter(queue="x", actor="a"))] == [a.id]
    picked = await backend.list_jobs(JobFilter(ids=[c.id, uuid4()]))
    assert [r.id for r in picked] == [c.id]
    assert await backend.list_jobs(JobFilter(ids=[])) == []


async def test_list_jobs_is_newest_first_and_limited(harness: Harness) -> None:
    backend = harness.backend
    jobs = [await backend.enqueue(args(payload={"n": n})) for n in range(5)]
    jobs += await backend.enqueue_batch([args(payload={"n": n}) for n in range(5, 8)])
    listed = await backend.list_jobs(JobFilter(limit=None))
    assert [r.id for r in listed] == [j.id for j in reversed(jobs)]
    limited = await backend.list_jobs(JobFilter(limit=3))
    assert [r.id for r in limited] == [j.id for j in reversed(jobs)][:3]
    assert await backend.list_jobs(JobFilter(limit=0)) == []
    assert len(await backend.list_jobs(JobFilter())) == 8  # default limit 100


async def test_counts_per_queue_and_status(harness: Harness) -> None:
    backend = harness.backend
    await backend.enqueue_batch([args(queue="b"), args(queue="b"), args(queue="a")])
    job = await backend.enqueue(args(queue="a"))
    await backend.write_cancel_request(job.id, None)
    assert await backend.count_by_queue_status() == [
        QueueStatusCount("a", JobStatus.PENDING, 1),
        QueueStatusCount("a", JobStatus.CANCELLED, 1),
        QueueStatusCount("b", JobStatus.PENDING, 2),
    ]


async def test_has_active_jobs_sees_waiting_and_running_jobs_of_the_queues_only(
    harness: Harness,
) -> None:
    made = await one_job_per_status(harness)
    rows = [await harness.backend.get(job_id) for job_id in made.values()]
    active = [row.queue for row in rows if row is not None and row.status in ACTIVE_STATUSES]
    finished = [row.queue for row in rows if row is not None and row.status not in ACTIVE_STATUSES]
    assert len(active) == len(ACTIVE_STATUSES)
    assert await harness.backend.has_active_jobs(active) is True
    assert await harness.backend.has_active_jobs(finished) is False
    assert await harness.backend.has_active_jobs(["nowhere"]) is False
    assert await harness.backend.has_active_jobs([]) is False


async def test_active_counts_include_jobs_with_a_fairness_key(harness: Harness) -> None:
    backend = harness.backend
    await backend.enqueue_batch(
        [args(queue="keyed", fairness_key=f"t{n}") for n in range(3)] + [args(queue="mixed")]
    )
    await backend.enqueue(args(queue="mixed", fairness_key="t0"))
    assert await backend.count_jobs(JobFilter(queue="keyed", active=True, limit=None)) == 3
    assert await backend.count_jobs(JobFilter(queue="mixed", active=True, limit=None)) == 2
    assert await backend.has_active_jobs(["keyed"]) is True


async def test_count_pending_jobs_counts_waiting_jobs_per_requested_actor(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.enqueue_batch([args(actor="a"), args(actor="a"), args(actor="b")])
    await job_in(harness, JobStatus.SCHEDULED, actor="b")
    await job_in(harness, JobStatus.RUNNING, actor="a")
    await job_in(harness, JobStatus.FAILED, actor="a")
    assert await backend.count_pending_jobs(["a", "b", "c"]) == {"a": 2, "b": 2}
    assert await backend.count_pending_jobs([]) == {}


async def test_attempts_and_events_come_back_oldest_first(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await job_in(harness, JobStatus.PENDING, max_attempts=3)
    worker = uuid4()
    for _ in range(2):
        await harness.travel(1)
        [claimed] = await backend.dispatch_batch(worker, [job.queue], 1, timedelta(minutes=1))
        # A body that began writes an attempt row when it ends (one held back before its
        # body began writes none).
        await backend.mark_started_many(worker, [Start(claimed.id, claimed.attempt)])
        await backend.mark_retry_after(claimed.lease(), timedelta(0))
        await backend.promote_scheduled_jobs()
    attempts = await backend.get_attempts(job.id)
    assert [a.outcome for a in attempts] == ["retry_after", "retry_after"]
    assert [a.attempt for a in attempts] == [1, 2]
    assert [a.id for a in attempts] == sorted(a.id for a in attempts)
    events = await backend.get_events(job.id)
    assert [(e.from_status, e.to_status) for e in events] == [
        (JobStatus.PENDING, JobStatus.RUNNING),
        (JobStatus.RUNNING, JobStatus.SCHEDULED),
        (JobStatus.SCHEDULED, JobStatus.PENDING),
    ] * 2
    assert [e.occurred_at for e in events] == sorted(e.occurred_at for e in events)
