"""Retention on every backend: which terminal jobs a prune moves to the archive (the prune),
what the archive then holds, and archive expiry."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import between, job_in, new_queue, reload, running_job

KEEP = timedelta(seconds=100)
ARCHIVE_FOR = timedelta(seconds=1000)
# A margin of seconds either side of a boundary: the Postgres clock runs while the test does.
MARGIN = 10


def policy(**retention: timedelta) -> PrunePolicy:
    """A policy keeping each named status (``succeeded=...``) that long, archived ARCHIVE_FOR."""
    keep = {JobStatus(name): value for name, value in retention.items()}
    return PrunePolicy(retention=keep, archive_for=ARCHIVE_FOR)


def every_terminal(
    keep: timedelta, *, batch_size: int = 10_000, queue: str | None = None
) -> PrunePolicy:
    """A policy pruning every terminal status after ``keep``."""
    statuses = (
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.CRASHED,
        JobStatus.ABANDONED,
    )
    return PrunePolicy(
        retention=dict.fromkeys(statuses, keep),
        archive_for=ARCHIVE_FOR,
        batch_size=batch_size,
        queue=queue,
    )


async def test_a_job_moves_once_past_its_statuses_retention(harness: Harness) -> None:
    backend = harness.backend
    old, _ = await job_in(harness, JobStatus.SUCCEEDED)
    await harness.travel(KEEP.total_seconds() - 2 * MARGIN)
    young, _ = await job_in(harness, JobStatus.SUCCEEDED)
    await harness.travel(3 * MARGIN)
    # old finished KEEP + MARGIN ago, young 3 * MARGIN ago.
    result = await backend.prune_jobs(policy(succeeded=KEEP))
    assert result.moved == {(JobStatus.SUCCEEDED, old.queue): 1}
    assert result.total == 1
    assert await backend.get(old.id) is None
    assert await backend.get_archived_job(old.id) is not None
    assert (await reload(backend, young.id)).status is JobStatus.SUCCEEDED
    assert await backend.get_archived_job(young.id) is None


async def test_each_status_has_its_own_retention_and_unlisted_statuses_stay(
    harness: Harness,
) -> None:
    backend = harness.backend
    succeeded, _ = await job_in(harness, JobStatus.SUCCEEDED)
    failed, _ = await job_in(harness, JobStatus.FAILED)
    cancelled, _ = await job_in(harness, JobStatus.CANCELLED)
    rules = policy(succeeded=KEEP, failed=KEEP * 10)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    first = await backend.prune_jobs(rules)
    assert first.moved == {(JobStatus.SUCCEEDED, succeeded.queue): 1}
    assert (await reload(backend, failed.id)).status is JobStatus.FAILED
    await harness.travel(KEEP.total_seconds() * 10)
    second = await backend.prune_jobs(rules)
    assert second.moved == {(JobStatus.FAILED, failed.queue): 1}
    await harness.travel(timedelta(days=365).total_seconds())
    assert (await backend.prune_jobs(rules)).total == 0
    assert (await reload(backend, cancelled.id)).status is JobStatus.CANCELLED


async def test_every_terminal_status_can_be_pruned(harness: Harness) -> None:
    backend = harness.backend
    jobs = {status: (await job_in(harness, status))[0] for status in every_terminal(KEEP).retention}
    await harness.travel(KEEP.total_seconds() + MARGIN)
    result = await backend.prune_jobs(every_terminal(KEEP))
    assert result.moved == {(status, job.queue): 1 for status, job in jobs.items()}
    for job in jobs.values():
        assert await backend.get(job.id) is None
        archived = await backend.get_archived_job(job.id)
        assert archived is not None
        assert archived.job.status is job.status


async def test_a_policy_without_statuses_prunes_nothing(harness: Harness) -> None:
    job, _ = await job_in(harness, JobStatus.SUCCEEDED)
    await harness.travel(timedelta(days=30).total_seconds())
    result = await harness.backend.prune_jobs(PrunePolicy(retention={}, archive_for=ARCHIVE_FOR))
    assert (result.moved, result.total) == ({}, 0)
    assert (await reload(harness.backend, job.id)).status is JobStatus.SUCCEEDED


async def test_jobs_that_are_not_terminal_are_never_pruned(harness: Harness) -> None:
    backend = harness.backend
    waiting = [
        (await job_in(harness, JobStatus.PENDING))[0],
        (await job_in(harness, JobStatus.SCHEDULED))[0],
        (await running_job(backend))[0],
        (await running_job(backend, started=False))[0],
    ]
    await harness.travel(timedelta(days=30).total_seconds())
    result = await backend.prune_jobs(every_terminal(timedelta(seconds=1)))
    assert (result.moved, result.total) == ({}, 0)
    for job in waiting:
        assert (await reload(backend, job.id)).status is job.status
        assert await backend.get_archived_job(job.id) is None


async def test_the_queue_filter_prunes_one_queue_only(harness: Harness) -> None:
    backend = harness.backend
    chosen, _ = await job_in(harness, JobStatus.SUCCEEDED)
    other, _ = await job_in(harness, JobStatus.SUCCEEDED)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    result = await backend.prune_jobs(every_terminal(KEEP, queue=chosen.queue))
    assert result.moved == {(JobStatus.SUCCEEDED, chosen.queue): 1}
    assert await backend.get(chosen.id) is None
    assert (await reload(backend, other.id)).status is JobStatus.SUCCEEDED
    assert (await backend.prune_jobs(every_terminal(KEEP, queue=new_queue()))).total == 0


async def _five_due_jobs(harness: Harness) -> tuple[str, list[UUID]]:
    """Three succeeded and two failed jobs in one queue, all past KEEP."""
    queue = new_queue()
    ids: list[UUID] = []
    for status in (JobStatus.SUCCEEDED,) * 3 + (JobStatus.FAILED,) * 2:
        job, _ = await job_in(harness, status, queue=queue)
        ids.append(job.id)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    return queue, ids


async def test_a_prune_moves_everything_due_in_batches(harness: Harness) -> None:
    backend = harness.backend
    queue, ids = await _five_due_jobs(harness)
    result = await backend.prune_jobs(every_terminal(KEEP, batch_size=2))
    assert result.moved == {(JobStatus.SUCCEEDED, queue): 3, (JobStatus.FAILED, queue): 2}
    assert (result.total, result.batches) == (5, 3)
    for job_id in ids:
        assert await backend.get(job_id) is None
        assert await backend.get_archived_job(job_id) is not None
    assert (await backend.prune_jobs(every_terminal(KEEP, batch_size=2))).total == 0


async def test_a_dry_run_counts_the_same_and_moves_nothing(harness: Harness) -> None:
    backend = harness.backend
    queue, ids = await _five_due_jobs(harness)
    dry = await backend.prune_jobs(every_terminal(KEEP, batch_size=2), dry_run=True)
    assert dry.moved == {(JobStatus.SUCCEEDED, queue): 3, (JobStatus.FAILED, queue): 2}
    assert dry.batches == 0
    for job_id in ids:
        assert await backend.get(job_id) is not None
        assert await backend.get_archived_job(job_id) is None
    real = await backend.prune_jobs(every_terminal(KEEP, batch_size=2))
    assert real.moved == dry.moved


async def test_the_archive_holds_the_row_as_it_was_and_its_attempts(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await job_in(harness, JobStatus.FAILED)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    before = await reload(backend, job.id)
    attempts = await backend.get_attempts(job.id)
    assert attempts
    assert await backend.get_events(job.id)
    low = await harness.now()
    assert (await backend.prune_jobs(policy(failed=KEEP))).total == 1
    high = await harness.now()
    assert await backend.get(job.id) is None
    archived = await backend.get_archived_job(job.id)
    assert archived is not None
    assert archived.job == before
    assert between(archived.archived_at, low, high)
    assert archived.expire_at == archived.archived_at + ARCHIVE_FOR
    assert await backend.get_archived_attempts(job.id) == attempts
    assert await backend.get_attempts(job.id) == []
    assert await backend.get_events(job.id) == []


async def test_unknown_jobs_are_not_in_the_archive(harness: Harness) -> None:
    live, _ = await job_in(harness, JobStatus.SUCCEEDED)
    for job_id in (uuid4(), live.id):
        assert await harness.backend.get_archived_job(job_id) is None
        assert await harness.backend.get_archived_attempts(job_id) == []


async def test_an_archived_job_is_read_back_until_its_expire_at_only(harness: Harness) -> None:
    backend = harness.backend
    first, _ = await job_in(harness, JobStatus.FAILED)
    second, _ = await job_in(harness, JobStatus.FAILED)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert (await backend.prune_jobs(every_terminal(KEEP, queue=first.queue))).total == 1
    half = ARCHIVE_FOR.total_seconds() / 2
    await harness.travel(half)
    assert (await backend.prune_jobs(every_terminal(KEEP, queue=second.queue))).total == 1
    await harness.travel(half + MARGIN)
    # first is past its expire_at, second half way there; neither's day need have ended.
    assert await backend.get_archived_job(first.id) is None
    assert await backend.get_archived_attempts(first.id) == []
    assert await backend.list_job_ids_matching(first.id.hex, 10) == []
    assert await backend.get_archived_job(second.id) is not None
    assert await backend.get_archived_attempts(second.id)
    assert await backend.list_job_ids_matching(second.id.hex, 10) == [second.id]


async def test_archive_expiry_removes_jobs_once_the_day_of_their_expiry_has_ended(
    harness: Harness,
) -> None:
    backend = harness.backend
    soon, _ = await job_in(harness, JobStatus.FAILED)
    later, _ = await job_in(harness, JobStatus.FAILED)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert (await backend.prune_jobs(every_terminal(KEEP, queue=soon.queue))).total == 1
    month = timedelta(days=30)
    keep_long = PrunePolicy(
        retention={JobStatus.FAILED: KEEP}, archive_for=month, queue=later.queue
    )
    assert (await backend.prune_jobs(keep_long)).total == 1
    assert await backend.expire_archive(10) == 0  # no expire_at has passed yet
    await harness.travel((ARCHIVE_FOR + timedelta(days=1)).total_seconds() + MARGIN)
    # soon's day of expiry has ended; later expires in a month.
    assert await backend.expire_archive(10) == 1
    assert await backend.get_archived_job(soon.id) is None
    assert await backend.get_archived_job(later.id) is not None
    assert await backend.get_archived_attempts(later.id)
    await harness.travel(month.total_seconds())
    assert await backend.expire_archive(10) == 1
    assert await backend.get_archived_job(later.id) is None


async def test_archive_expiry_works_through_every_batch(harness: Harness) -> None:
    backend = harness.backend
    _, ids = await _five_due_jobs(harness)
    assert (await backend.prune_jobs(every_terminal(KEEP))).total == 5
    await harness.travel((ARCHIVE_FOR + timedelta(days=1)).total_seconds() + MARGIN)
    batches: list[int] = []
    assert await backend.expire_archive(2, on_batch=batches.append) == 5
    assert batches == [2, 2, 1]  # reported batch by batch, as each commits
    for job_id in ids:
        assert await backend.get_archived_job(job_id) is None
    assert await backend.expire_archive(2) == 0


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING])
def test_a_policy_rejects_statuses_that_are_not_terminal(status: JobStatus) -> None:
    with pytest.raises(ValueError, match="only terminal jobs"):
        PrunePolicy(retention={status: KEEP}, archive_for=ARCHIVE_FOR)


@pytest.mark.parametrize(
    ("keep", "archive_for", "batch_size", "message"),
    [
        (timedelta(0), ARCHIVE_FOR, 10, "retention"),
        (-KEEP, ARCHIVE_FOR, 10, "retention"),
        (KEEP, timedelta(0), 10, "archive_for"),
        (KEEP, -ARCHIVE_FOR, 10, "archive_for"),
        (KEEP, ARCHIVE_FOR, 0, "batch_size"),
        (KEEP, ARCHIVE_FOR, -1, "batch_size"),
    ],
)
def test_a_policy_rejects_non_positive_durations_and_batches(
    keep: timedelta, archive_for: timedelta, batch_size: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PrunePolicy(
            retention={JobStatus.SUCCEEDED: keep}, archive_for=archive_for, batch_size=batch_size
        )
