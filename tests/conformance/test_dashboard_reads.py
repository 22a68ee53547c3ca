"""Dashboard reads: per-queue activity (``get_dashboard_stats``) and the jobs pane's
``list_recent_jobs``, the same on both backends."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import RECENT_JOBS_MAX, JobFilter, QueueActivity, Start
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, args, new_queue, reload, running_job

HOUR = timedelta(hours=1)


async def _activity(harness: Harness, queue: str, minutes: int = 10) -> QueueActivity:
    stats = await harness.backend.get_dashboard_stats(HOUR, minutes)
    found = [q for q in stats.queues if q.name == queue]
    assert len(found) == 1, [q.name for q in stats.queues]
    return found[0]


async def _failed(harness: Harness, queue: str, actor: str = "work") -> None:
    job, _ = await running_job(harness.backend, queue=queue, actor=actor, priority=1000)
    assert await harness.backend.mark_failed_or_retry(job.lease(), BOOM, None) is not None


async def _succeeded(harness: Harness, queue: str, actor: str = "work") -> None:
    job, _ = await running_job(harness.backend, queue=queue, actor=actor, priority=1000)
    assert await harness.backend.mark_succeeded(job.lease(), {"ok": True})


# --- get_dashboard_stats --------------------------------------------------------------------------


async def test_there_is_no_queue_activity_before_anything_happens(harness: Harness) -> None:
    before = await harness.now()
    stats = await harness.backend.get_dashboard_stats(HOUR, 10)
    assert stats.queues == []
    assert stats.window == HOUR
    assert before <= stats.now <= await harness.now()


async def test_active_jobs_are_counted_exactly_per_queue(harness: Harness) -> None:
    backend = harness.backend
    media, mail = new_queue(), new_queue()
    await backend.enqueue_batch([args(queue=media) for _ in range(3)])
    await backend.enqueue_batch([args(queue=media, delay=HOUR) for _ in range(2)])
    await running_job(backend, queue=media, priority=100)  # dispatched ahead of the rest
    await backend.enqueue(args(queue=mail, priority=7))
    stats = await backend.get_dashboard_stats(HOUR, 10)
    by_name = {q.name: q for q in stats.queues}
    assert [q.name for q in stats.queues] == sorted([media, mail])
    assert (by_name[media].pending, by_name[media].scheduled, by_name[media].running) == (3, 2, 1)
    assert (by_name[mail].pending, by_name[mail].scheduled, by_name[mail].running) == (1, 0, 0)
    assert (by_name[media].claimed, by_name[mail].claimed) == (0, 0)
    assert by_name[media].finished == {} and by_name[media].finished_per_minute == [0] * 10


async def test_claimed_jobs_are_counted_apart_from_running_ones(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await running_job(backend, queue=queue)
    await backend.enqueue_batch([args(queue=queue) for _ in range(3)])
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [queue], 2, HOUR)
    activity = await _activity(harness, queue)
    assert (activity.pending, activity.running, activity.claimed) == (1, 1, 2)
    await backend.mark_started_many(worker, [Start(claimed[0].id, claimed[0].attempt)])
    activity = await _activity(harness, queue)
    assert (activity.pending, activity.running, activity.claimed) == (1, 2, 1)


async def test_the_longest_waiting_claim_and_due_scheduled_job_are_found(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue, other = new_queue(), new_queue()
    await backend.enqueue_batch([args(queue=queue) for _ in range(2)])
    worker = uuid4()
    first = await backend.dispatch_batch(worker, [queue], 1, HOUR)
    due = await backend.enqueue(args(queue=queue, delay=timedelta(seconds=5)))
    await backend.enqueue(args(queue=queue, delay=HOUR))
    await backend.enqueue(args(queue=other, delay=HOUR))
    await harness.travel(20)
    await backend.dispatch_batch(worker, [queue], 1, HOUR)
    activity = await _activity(harness, queue)
    assert activity.claimed == 2
    assert activity.oldest_claimed_at == (await reload(backend, first[0].id)).claimed_at
    assert activity.oldest_due_scheduled_at == (await reload(backend, due.id)).scheduled_at
    assert (await _activity(harness, other)).oldest_due_scheduled_at is None
    await backend.mark_started_many(worker, [Start(first[0].id, first[0].attempt)])
    later = await _activity(harness, queue)
    assert later.oldest_claimed_at is not None and later.oldest_claimed_at > first[0].claimed_at


async def test_the_oldest_pending_job_is_found_across_priorities(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    oldest = await backend.enqueue(args(queue=queue, priority=0))
    await harness.travel(30)
    await backend.enqueue_batch([args(queue=queue, priority=9), args(queue=queue, priority=-3)])
    await harness.travel(5)
    activity = await _activity(harness, queue)
    assert activity.oldest_pending_at == (await reload(backend, oldest.id)).scheduled_at
    stats = await backend.get_dashboard_stats(HOUR, 10)
    assert activity.oldest_pending_at is not None
    waited = stats.now - activity.oldest_pending_at
    assert timedelta(seconds=35) <= waited < timedelta(seconds=60)


async def test_pending_jobs_with_and_without_a_fairness_key_all_count(harness: Harness) -> None:
    backend = harness.backend
    mixed, keyed = new_queue(), new_queue()
    oldest = await backend.enqueue(args(queue=mixed, fairness_key="t1"))
    await harness.travel(10)
    await backend.enqueue_batch([args(queue=mixed), args(queue=mixed, priority=3)])
    await backend.enqueue_batch([args(queue=mixed, fairness_key="t2", priority=-1)])
    await backend.enqueue_batch([args(queue=keyed, fairness_key="t1") for _ in range(2)])
    stats = await backend.get_dashboard_stats(HOUR, 10)
    by_name = {q.name: q for q in stats.queues}
    assert sorted(by_name) == sorted([mixed, keyed])
    assert (by_name[mixed].pending, by_name[keyed].pending) == (4, 2)
    assert by_name[mixed].oldest_pending_at == (await reload(backend, oldest.id)).scheduled_at
    assert by_name[keyed].oldest_pending_at is not None


async def test_a_queue_without_pending_jobs_has_no_oldest_pending(harness: Harness) -> None:
    queue = new_queue()
    await running_job(harness.backend, queue=queue)
    await harness.backend.enqueue(args(queue=queue, delay=HOUR))
    assert (await _activity(harness, queue)).oldest_pending_at is None


async def test_finished_jobs_are_counted_per_status_inside_the_window(harness: Harness) -> None:
    queue = new_queue()
    await _failed(harness, queue)
    await harness.travel(2 * 3600)  # that failure is now outside the one-hour window
    await _failed(harness, queue)
    await _succeeded(harness, queue)
    await _succeeded(harness, queue)
    cancelled = await harness.backend.enqueue(args(queue=queue))
    assert await harness.backend.write_cancel_request(cancelled.id, "no") == "cancelled"
    activity = await _activity(harness, queue)
    assert list(activity.finished.items()) == [
        (JobStatus.SUCCEEDED, 2),
        (JobStatus.FAILED, 1),
        (JobStatus.CANCELLED, 1),
    ]


async def test_finished_per_minute_buckets_run_oldest_first(harness: Harness) -> None:
    queue = new_queue()
    await _succeeded(harness, queue)
    await harness.travel(150)  # 2.5 minutes ago
    await _succeeded(harness, queue)
    await _failed(harness, queue)
    await harness.travel(20)
    activity = await _activity(harness, queue, minutes=5)
    # The earlier job finished 170s ago (minute 2 before now), the others 20s ago.
    assert activity.finished_per_minute == [0, 0, 1, 0, 2]
    await harness.travel(10 * 60)
    later = await _activity(harness, queue, minutes=5)
    assert later.finished_per_minute == [0, 0, 0, 0, 0]
    assert later.finished == {JobStatus.SUCCEEDED: 2, JobStatus.FAILED: 1}


async def test_idle_queues_with_a_row_or_only_old_jobs_are_listed(harness: Harness) -> None:
    backend = harness.backend
    idle, old = new_queue(), new_queue()
    await backend.update_queue(idle, mode="round_robin", max_concurrent=3, paused=True)
    await _succeeded(harness, old)
    await harness.travel(3 * 3600)
    stats = await backend.get_dashboard_stats(HOUR, 10)
    by_name = {q.name: q for q in stats.queues}
    assert by_name[idle] == QueueActivity(
        name=idle,
        mode="round_robin",
        max_concurrent=3,
        paused=True,
        pending=0,
        scheduled=0,
        running=0,
        oldest_pending_at=None,
        finished={},
        finished_per_minute=[0] * 10,
    )
    assert by_name[old].mode == "strict_fifo" and not by_name[old].paused
    assert by_name[old].finished == {}


@pytest.mark.parametrize(("window", "minutes"), [(timedelta(0), 10), (HOUR, 0), (HOUR, 1441)])
async def test_dashboard_stats_reject_a_bad_window(
    harness: Harness, window: timedelta, minutes: int
) -> None:
    with pytest.raises(ValueError):
        await harness.backend.get_dashboard_stats(window, minutes)


# --- list_recent_jobs --------------------------------------------------------------------------


async def test_recent_jobs_come_most_recent_activity_first(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    first = await backend.enqueue(args(queue=queue, priority=-5))  # created first ...
    await harness.travel(10)
    second, worker = await running_job(backend, queue=queue)  # ... dispatched before it
    await backend.mark_failed_or_retry(second.lease(), BOOM, None)
    await harness.travel(10)
    claimed = await backend.dispatch_batch(worker, [queue], 1, timedelta(seconds=30))
    assert [c.id for c in claimed] == [first.id]
    await harness.travel(10)
    waiting = await backend.enqueue(args(queue=queue))
    await harness.travel(10)
    await backend.mark_succeeded(claimed[0].lease(), None)  # finished last
    rows = await backend.list_recent_jobs(JobFilter(queue=queue))
    assert [r.id for r in rows] == [first.id, waiting.id, second.id]


async def test_a_running_job_counts_from_when_it_started(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    job = await backend.enqueue(args(queue=queue))
    await harness.travel(10)
    newer = await backend.enqueue(args(queue=queue))
    await harness.travel(10)
    await backend.dispatch_batch(uuid4(), [queue], 1, HOUR)
    rows = await backend.list_recent_jobs(JobFilter(queue=queue))
    assert [(r.id, r.status) for r in rows] == [
        (job.id, JobStatus.RUNNING),
        (newer.id, JobStatus.PENDING),
    ]


async def test_a_claimed_job_counts_from_its_claim_and_a_started_one_from_its_start(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue = new_queue()
    worker = uuid4()
    await backend.enqueue_batch([args(queue=queue, payload={"n": n}) for n in range(2)])
    [early] = await backend.dispatch_batch(worker, [queue], 1, HOUR)
    await harness.travel(10)
    [late] = await backend.dispatch_batch(worker, [queue], 1, HOUR)
    await harness.travel(10)
    rows = await backend.list_recent_jobs(JobFilter(queue=queue))
    assert [r.id for r in rows] == [late.id, early.id]
    assert await backend.mark_started_many(worker, [Start(early.id, early.attempt)])
    rows = await backend.list_recent_jobs(JobFilter(queue=queue))
    assert [r.id for r in rows] == [early.id, late.id]


async def test_recent_jobs_filter_by_status_queue_and_actor(harness: Harness) -> None:
    backend = harness.backend
    queue, other = new_queue(), new_queue()
    await _failed(harness, queue, actor="resize")
    await _failed(harness, queue, actor="mail")
    await _failed(harness, other, actor="resize")
    await _succeeded(harness, queue, actor="resize")
    await backend.enqueue(args("resize", queue=queue))
    failed = await backend.list_recent_jobs(JobFilter(status="failed", queue=queue))
    assert sorted(r.actor for r in failed) == ["mail", "resize"]
    assert {r.queue for r in failed} == {queue}
    resize = await backend.list_recent_jobs(JobFilter(status=["failed", "pending"], actor="resize"))
    assert sorted((r.queue == queue, r.status.value) for r in resize) == [
        (False, "failed"),
        (True, "failed"),
        (True, "pending"),
    ]
    both = await backend.list_recent_jobs(JobFilter(queue=queue, actor="resize"))
    assert sorted(r.status.value for r in both) == ["failed", "pending", "succeeded"]
    assert await backend.list_recent_jobs(JobFilter(status=[], queue=queue)) == []
    assert await backend.list_recent_jobs(JobFilter(active=True, queue=other)) == []


async def test_recent_jobs_stop_at_the_limit(harness: Harness) -> None:
    queue = new_queue()
    for _ in range(4):
        await _failed(harness, queue)
        await harness.travel(1)
    rows = await harness.backend.list_recent_jobs(JobFilter(queue=queue, limit=3))
    assert len(rows) == 3
    assert await harness.backend.list_recent_jobs(JobFilter(queue=queue, limit=0)) == []


@pytest.mark.parametrize(
    "job_filter",
    [JobFilter(limit=None), JobFilter(limit=RECENT_JOBS_MAX + 1), JobFilter(ids=[])],
    ids=["no-limit", "over-the-maximum", "ids"],
)
async def test_recent_jobs_reject_an_unbounded_or_id_filter(
    harness: Harness, job_filter: JobFilter
) -> None:
    with pytest.raises(ValueError):
        await harness.backend.list_recent_jobs(job_filter)


async def test_a_backend_on_a_primary_reads_nothing_stale(harness: Harness) -> None:
    # A standby's answer is tested against a real streaming replica
    # (tests/e2e/test_replica_reads.py); the shared server and memory are no standby.
    assert await harness.backend.get_read_staleness() is None
