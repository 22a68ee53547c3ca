"""The fleet metrics' read (``get_fleet_stats``): per queue and per actor counts, the oldest
pending job, the window's finished jobs and the start latency, the same on both backends."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import ActorFleetStats, QueueFleetStats, Start, StartLatency
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, args, new_queue, reload, running_job

WINDOW = timedelta(minutes=10)
LEASE = timedelta(minutes=30)  # longer than any travel here: no lease expires meanwhile


async def _queue(harness: Harness, name: str) -> QueueFleetStats:
    stats = await harness.backend.get_fleet_stats(WINDOW)
    found = [q for q in stats.queues if q.name == name]
    assert len(found) == 1, [q.name for q in stats.queues]
    return found[0]


def _actor(queue: QueueFleetStats, actor: str) -> ActorFleetStats:
    found = [a for a in queue.actors if a.actor == actor]
    assert len(found) == 1, [a.actor for a in queue.actors]
    return found[0]


async def _start_all(harness: Harness, queue: str, count: int) -> None:
    """Claim ``count`` jobs of the queue for one worker and start their bodies now."""
    worker = uuid4()
    claimed = await harness.backend.dispatch_batch(worker, [queue], count, LEASE)
    assert len(claimed) == count
    starts = [Start(job.id, job.attempt) for job in claimed]
    assert len(await harness.backend.mark_started_many(worker, starts)) == count


def _close_to(latency: StartLatency | None, started: int, mean: float, p50: float) -> None:
    assert latency is not None
    assert latency.started == started
    assert latency.mean == pytest.approx(mean, abs=1.0)
    assert latency.percentiles[0.5] == pytest.approx(p50, abs=1.0)


async def test_nothing_is_reported_before_anything_happens(harness: Harness) -> None:
    before = await harness.now()
    stats = await harness.backend.get_fleet_stats(WINDOW)
    assert stats.queues == []
    assert stats.window == WINDOW
    assert before <= stats.now <= await harness.now()


async def test_waiting_and_running_jobs_are_counted_per_queue_and_actor(harness: Harness) -> None:
    backend = harness.backend
    media, mail = new_queue(), new_queue()
    await running_job(backend, queue=media, actor="resize", priority=100)  # started
    await running_job(backend, queue=media, actor="thumb", priority=100, started=False)
    await backend.enqueue_batch([args("resize", queue=media) for _ in range(3)])
    await backend.enqueue_batch([args("thumb", queue=media) for _ in range(2)])
    await backend.enqueue(args("thumb", queue=media, delay=timedelta(hours=1)))
    await backend.enqueue(args("send", queue=mail))

    stats = await backend.get_fleet_stats(WINDOW)
    by_name = {q.name: q for q in stats.queues}
    assert sorted(by_name) == sorted([media, mail])
    queue = by_name[media]
    counts = (queue.pending, queue.scheduled, queue.running, queue.claimed)
    assert counts == (5, 1, 1, 1)
    assert [a.actor for a in queue.actors] == ["resize", "thumb"]
    resize, thumb = queue.actors
    assert (resize.pending, resize.running, resize.claimed) == (3, 1, 0)
    assert (thumb.pending, thumb.running, thumb.claimed) == (2, 0, 1)
    assert (by_name[mail].pending, by_name[mail].scheduled) == (1, 0)
    assert queue.finished == {} and not queue.paused
    assert queue.latency is not None and queue.latency.started == 1  # the running one


async def test_the_oldest_pending_job_is_found_across_priorities_and_keys(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue = new_queue()
    oldest = await backend.enqueue(args(queue=queue, priority=-5, fairness_key="t1"))
    await harness.travel(30)
    await backend.enqueue_batch([args(queue=queue, priority=9), args(queue=queue)])
    stats = await backend.get_fleet_stats(WINDOW)
    (found,) = [q for q in stats.queues if q.name == queue]
    assert found.oldest_pending_at == (await reload(backend, oldest.id)).scheduled_at
    # The dashboard's read finds the same job (PostgreSQL: two copies of one CTE).
    dashboard = await backend.get_dashboard_stats(WINDOW, 1)
    (activity,) = [q for q in dashboard.queues if q.name == queue]
    assert activity.oldest_pending_at == found.oldest_pending_at
    await _start_all(harness, queue, 3)
    assert (await _queue(harness, queue)).oldest_pending_at is None


async def test_finished_jobs_are_counted_per_actor_and_status_inside_the_window(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue = new_queue()
    old, _ = await running_job(backend, queue=queue, actor="a")
    assert await backend.mark_succeeded(old.lease(), None)
    await harness.travel(WINDOW.total_seconds() + 60)  # that success is now outside the window
    for actor in ("a", "a", "b"):
        job, _ = await running_job(backend, queue=queue, actor=actor)
        assert await backend.mark_succeeded(job.lease(), None)
    failed, _ = await running_job(backend, queue=queue, actor="b")
    assert await backend.mark_failed_or_retry(failed.lease(), BOOM, None) is not None
    cancelled = await backend.enqueue(args("a", queue=queue))
    assert await backend.write_cancel_request(cancelled.id, "no") == "cancelled"

    found = await _queue(harness, queue)
    assert list(found.finished.items()) == [
        (JobStatus.SUCCEEDED, 3),
        (JobStatus.FAILED, 1),
        (JobStatus.CANCELLED, 1),
    ]
    a, b = _actor(found, "a"), _actor(found, "b")
    assert a.finished == {JobStatus.SUCCEEDED: 2, JobStatus.CANCELLED: 1}
    assert b.finished == {JobStatus.SUCCEEDED: 1, JobStatus.FAILED: 1}
    assert (found.pending, found.running) == (0, 0)


async def test_start_latency_is_measured_from_due_to_start(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.enqueue(args("a", queue=queue))
    await harness.travel(30)
    await backend.enqueue(args("a", queue=queue))
    await harness.travel(10)
    await _start_all(harness, queue, 2)  # they waited 40 and 10 seconds
    quick, _ = await running_job(backend, queue=queue, actor="b")  # waited ~0 seconds
    assert await backend.mark_succeeded(quick.lease(), None)

    found = await _queue(harness, queue)
    a = _actor(found, "a")
    _close_to(a.latency, started=2, mean=25, p50=25)
    assert a.latency is not None
    # percentile_cont: linear between the two nearest waits.
    assert a.latency.percentiles[0.95] == pytest.approx(10 + 30 * 0.95, abs=1.0)
    assert a.latency.percentiles[0.99] == pytest.approx(10 + 30 * 0.99, abs=1.0)
    assert a.latency.longest == pytest.approx(40, abs=1.0)
    _close_to(_actor(found, "b").latency, started=1, mean=0, p50=0)
    # The queue's latency is over all its jobs, not an average of its actors'.
    _close_to(found.latency, started=3, mean=50 / 3, p50=10)


async def test_a_delay_is_not_waiting_and_old_starts_leave_the_window(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    early, _ = await running_job(backend, queue=queue, actor="a")  # started long ago ...
    await backend.enqueue(args("a", queue=queue, delay=timedelta(hours=1)))
    await harness.travel(3600 + 20)
    assert await backend.promote_scheduled_jobs() >= 1
    await _start_all(harness, queue, 1)  # due 20 seconds ago, enqueued an hour before
    assert await backend.mark_succeeded(early.lease(), None)  # ... ends within the window

    found = await _queue(harness, queue)
    assert found.finished == {JobStatus.SUCCEEDED: 1}
    _close_to(found.latency, started=1, mean=20, p50=20)
    await harness.travel(WINDOW.total_seconds() + 60)
    later = await _queue(harness, queue)
    assert later.latency is None and later.finished == {}
    assert later.running == 1  # still running, started before the window


async def test_a_paused_queue_without_jobs_is_listed(harness: Harness) -> None:
    queue = new_queue()
    await harness.backend.update_queue(queue, paused=True)
    assert await _queue(harness, queue) == QueueFleetStats(name=queue, paused=True)


@pytest.mark.parametrize("window", [timedelta(0), timedelta(seconds=-1)])
async def test_fleet_stats_reject_a_window_that_is_not_positive(
    harness: Harness, window: timedelta
) -> None:
    with pytest.raises(ValueError):
        await harness.backend.get_fleet_stats(window)
