"""Operator reads: counting what a filter matches, and a waiting job's dispatch position."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import JobFilter
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import LEASE, args, job_in, new_queue

# --- count_jobs -------------------------------------------------------------------------------


async def test_count_jobs_counts_what_list_jobs_would_return(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.enqueue_batch([args(queue=queue), args(queue=queue), args("other", queue=queue)])
    cancelled = await backend.enqueue(args(queue=queue))
    await backend.write_cancel_request(cancelled.id, None)
    await backend.enqueue(args(queue=new_queue()))
    filters = [
        JobFilter(queue=queue, limit=None),
        JobFilter(queue=queue, actor="work", limit=None),
        JobFilter(queue=queue, status="pending", limit=None),
        JobFilter(status=["cancelled", "failed"], limit=None),
        JobFilter(active=True, limit=None),
        JobFilter(ids=[cancelled.id], limit=None),
        JobFilter(limit=None),
    ]
    for job_filter in filters:
        listed = await backend.list_jobs(job_filter)
        assert await backend.count_jobs(job_filter) == len(listed), job_filter
    assert await backend.count_jobs(JobFilter(queue=queue, limit=None)) == 4


async def test_count_jobs_stops_at_the_filter_limit(harness: Harness) -> None:
    queue = new_queue()
    await harness.backend.enqueue_batch([args(queue=queue) for _ in range(5)])
    assert await harness.backend.count_jobs(JobFilter(queue=queue, limit=3)) == 3
    assert await harness.backend.count_jobs(JobFilter(queue=queue, limit=0)) == 0


async def test_count_jobs_with_an_empty_status_list_is_zero(harness: Harness) -> None:
    await harness.backend.enqueue(args(queue=new_queue()))
    assert await harness.backend.count_jobs(JobFilter(status=[], limit=None)) == 0


# --- get_dispatch_position ------------------------------------------------------------------


async def test_there_is_no_position_for_an_unknown_job(harness: Harness) -> None:
    assert await harness.backend.get_dispatch_position(uuid4()) is None


async def test_strict_fifo_position_counts_the_jobs_dispatched_first(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    first, second, third = await backend.enqueue_batch([args(queue=queue) for _ in range(3)])
    urgent = await backend.enqueue(args(queue=queue, priority=5))
    await backend.enqueue(args(queue=new_queue()))  # another queue never counts
    positions = [await backend.get_dispatch_position(job.id) for job in (first, second, third)]
    assert [(p.mode, p.ahead) for p in positions if p] == [
        ("strict_fifo", 1),
        ("strict_fifo", 2),
        ("strict_fifo", 3),
    ]
    top = await backend.get_dispatch_position(urgent.id)
    assert top is not None and top.ahead == 0


async def test_strict_fifo_position_counts_jobs_with_a_fairness_key(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    first, second, third = await backend.enqueue_batch(
        [
            args(queue=queue, fairness_key="a"),
            args(queue=queue),
            args(queue=queue, fairness_key="b"),
        ]
    )
    positions = [await backend.get_dispatch_position(job.id) for job in (first, second, third)]
    assert [p.ahead for p in positions if p] == [0, 1, 2]


async def test_round_robin_position_ranks_inside_each_fairness_cohort(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.update_queue(queue, mode="round_robin")
    a1, a2, a3, b1, n1 = await backend.enqueue_batch(
        [
            args(queue=queue, fairness_key="a"),
            args(queue=queue, fairness_key="a"),
            args(queue=queue, fairness_key="a"),
            args(queue=queue, fairness_key="b"),
            args(queue=queue),
        ]
    )
    # Rank 1 of every cohort first (a1, b1, n1 by priority/time/id), then rank 2 (a2), ...
    expected = {a1.id: (0, 0), b1.id: (1, 1), n1.id: (2, 2), a2.id: (3, 2), a3.id: (4, 2)}
    for job_id, (ahead, other) in expected.items():
        position = await backend.get_dispatch_position(job_id)
        assert position is not None
        assert (position.mode, position.ahead, position.ahead_other_cohorts) == (
            "round_robin",
            ahead,
            other,
        ), job_id


async def test_jobs_that_are_not_waiting_have_nobody_ahead(harness: Harness) -> None:
    backend = harness.backend
    for status in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.CANCELLED):
        job, _ = await job_in(harness, status)
        await backend.enqueue(args(queue=job.queue))  # a waiting job in the same queue
        position = await backend.get_dispatch_position(job.id)
        assert position is not None
        assert (position.ahead, position.ahead_other_cohorts) == (0, 0), status


async def test_the_position_carries_the_backend_clock(harness: Harness) -> None:
    job = await harness.backend.enqueue(args(queue=new_queue()))
    before = await harness.now()
    position = await harness.backend.get_dispatch_position(job.id)
    after = await harness.now()
    assert position is not None
    assert before <= position.now <= after


async def test_a_running_job_of_the_queue_is_not_ahead_of_anyone(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.enqueue(args(queue=queue))
    await backend.dispatch_batch(uuid4(), [queue], 1, LEASE)
    waiting = await backend.enqueue(args(queue=queue))
    later = await backend.enqueue(args(queue=queue, delay=timedelta(hours=1)))
    position = await backend.get_dispatch_position(waiting.id)
    assert position is not None and position.ahead == 0
    assert later.status is JobStatus.SCHEDULED


async def test_round_robin_ties_go_to_the_cohort_served_least_recently(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    await backend.update_queue(queue, mode="round_robin")
    await backend.enqueue(args(queue=queue, fairness_key="a"))
    await backend.dispatch_batch(uuid4(), [queue], 1, LEASE)  # cohort a was just served
    a1 = await backend.enqueue(args(queue=queue, fairness_key="a"))
    b1 = await backend.enqueue(args(queue=queue, fairness_key="b"))
    # Both are rank 1 of their cohort with equal priority: b, never served, goes first.
    first = await backend.get_dispatch_position(b1.id)
    second = await backend.get_dispatch_position(a1.id)
    assert first is not None and second is not None
    assert (first.ahead, second.ahead, second.ahead_other_cohorts) == (0, 1, 1)
