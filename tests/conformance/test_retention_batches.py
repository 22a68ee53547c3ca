"""Retention on every backend, batch by batch: where batches end, what ``on_batch`` hears,
two prunes at once, jobs that are not terminal whatever their age, and a job's every attempt
through the archive and out of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import (
    BOOM,
    LEASE,
    args,
    job_in,
    new_queue,
    reload,
    running_job,
)
from tests.conformance.test_retention import ARCHIVE_FOR, KEEP, MARGIN, every_terminal

YEARS = timedelta(days=3 * 365).total_seconds()


async def _due_jobs(harness: Harness, count: int) -> tuple[str, list[UUID]]:
    """``count`` succeeded jobs in one queue, all past KEEP."""
    queue = new_queue()
    ids = [(await job_in(harness, JobStatus.SUCCEEDED, queue=queue))[0].id for _ in range(count)]
    await harness.travel(KEEP.total_seconds() + MARGIN)
    return queue, ids


@pytest.mark.parametrize(
    ("batch_size", "batches"),
    [
        (3, [3, 3, 0]),  # the size divides the backlog: one empty batch ends the run
        (6, [6, 0]),
        (4, [4, 2]),  # it does not: the short batch ends it
        (7, [6]),
    ],
)
async def test_a_prune_commits_full_batches_until_a_short_one_and_reports_each(
    harness: Harness, batch_size: int, batches: list[int]
) -> None:
    backend = harness.backend
    queue, ids = await _due_jobs(harness, 6)
    heard: list[int] = []
    result = await backend.prune_jobs(
        every_terminal(KEEP, batch_size=batch_size), on_batch=heard.append
    )
    assert heard == batches
    assert (result.total, result.batches) == (6, len(batches))
    assert result.moved == {(JobStatus.SUCCEEDED, queue): 6}
    for job_id in ids:
        assert await backend.get(job_id) is None
        assert await backend.get_archived_job(job_id) is not None


async def test_a_dry_run_reports_no_batches(harness: Harness) -> None:
    queue, ids = await _due_jobs(harness, 3)
    heard: list[int] = []
    dry = await harness.backend.prune_jobs(
        every_terminal(KEEP, batch_size=2), dry_run=True, on_batch=heard.append
    )
    assert (dry.moved, dry.batches, heard) == ({(JobStatus.SUCCEEDED, queue): 3}, 0, [])
    for job_id in ids:
        assert await harness.backend.get(job_id) is not None


async def test_two_prunes_at_once_move_each_job_once(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    ids: list[UUID] = []
    for status in (JobStatus.SUCCEEDED,) * 5 + (JobStatus.FAILED,) * 4:
        ids.append((await job_in(harness, status, queue=queue))[0].id)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    rules = every_terminal(KEEP, batch_size=2)
    first, second = await asyncio.gather(backend.prune_jobs(rules), backend.prune_jobs(rules))
    assert first.total + second.total == 9
    together = {
        key: first.moved.get(key, 0) + second.moved.get(key, 0)
        for key in first.moved.keys() | second.moved.keys()
    }
    assert together == {(JobStatus.SUCCEEDED, queue): 5, (JobStatus.FAILED, queue): 4}
    for job_id in ids:
        assert await backend.get(job_id) is None
        assert await backend.get_archived_job(job_id) is not None
    assert (await backend.prune_jobs(rules)).total == 0


async def test_jobs_that_are_waiting_or_running_are_never_pruned_whatever_their_age(
    harness: Harness,
) -> None:
    backend = harness.backend
    # A job that finished long ago and was retried: pending again, then running again, with
    # its age (and on some backends its old finished_at) far past every retention.
    retried, _ = await job_in(harness, JobStatus.FAILED)
    pending, _ = await job_in(harness, JobStatus.PENDING)
    scheduled = await backend.enqueue(args(queue=new_queue(), delay=timedelta(days=10 * 365)))
    running, _ = await running_job(backend, lease=timedelta(days=10 * 365))
    claimed, _ = await running_job(backend, lease=timedelta(days=10 * 365), started=False)
    await harness.travel(YEARS)
    assert await backend.retry_job(retried.id)
    rules = every_terminal(timedelta(seconds=1), batch_size=1)
    assert (await backend.prune_jobs(rules)).total == 0
    assert (await backend.prune_jobs(rules, dry_run=True)).total == 0
    [again] = await backend.dispatch_batch(uuid4(), [retried.queue], 1, LEASE)
    assert again.id == retried.id
    await harness.travel(YEARS)
    assert (await backend.prune_jobs(rules)).total == 0
    for job, status in (
        (retried, JobStatus.RUNNING),
        (pending, JobStatus.PENDING),
        (scheduled, JobStatus.SCHEDULED),
        (running, JobStatus.RUNNING),
        (claimed, JobStatus.RUNNING),
    ):
        assert (await reload(backend, job.id)).status is status
        assert await backend.get_archived_job(job.id) is None


async def test_every_attempt_goes_to_the_archive_and_leaves_with_its_job(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, max_attempts=3)
    assert await backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(0)) is not None
    await harness.travel(1)
    assert await backend.promote_scheduled_jobs() == 1
    [second] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert await backend.mark_failed_or_retry(second.lease(), BOOM, None) is not None
    await harness.travel(KEEP.total_seconds() + MARGIN)
    attempts = await backend.get_attempts(job.id)
    assert [a.attempt for a in attempts] == [1, 2]
    assert (await backend.prune_jobs(every_terminal(KEEP))).total == 1
    assert await backend.get_archived_attempts(job.id) == attempts
    await harness.travel((ARCHIVE_FOR + timedelta(days=1)).total_seconds() + MARGIN)
    assert await backend.expire_archive(1) == 1
    assert await backend.get_archived_job(job.id) is None
    assert await backend.get_archived_attempts(job.id) == []
