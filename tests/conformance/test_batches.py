"""Batches on every backend: the batch row, every row of the outcome table, the finalizer
made exactly once when a batch leaves ``active`` (complete or aborted), the children's counts,
the list filter and the two sweeps (stale completion, prune of ended batches)."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import (
    BATCH_ABORT_MESSAGE,
    FINALIZES_KEY,
    BatchCounts,
    BatchFilter,
    BatchOutcome,
    BatchRow,
    BatchStatus,
    EnqueueArgs,
    JobFilter,
    JobRow,
    NewBatch,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, between, job_in, new_queue, reload

S = JobStatus
KEEP = timedelta(hours=1)
MARGIN = 10  # seconds either side of a boundary: the Postgres clock runs while the test does


def finalizer_for(batch_id: UUID, **fields: object) -> EnqueueArgs:
    """A finalizer as the client prepares one: a fixed id and ``finalizes_batch``."""
    fields.setdefault("queue", new_queue())
    return args(
        "finalize",
        job_id=uuid7(),
        metadata={FINALIZES_KEY: str(batch_id)},
        payload={"batch": str(batch_id)},
        **fields,
    )


async def new_batch(
    harness: Harness,
    *,
    threshold: int | None = None,
    finalizer: bool = True,
    size: int = 0,
    queue: str | None = None,
) -> NewBatch:
    """A batch row (no children yet), with a finalizer unless told otherwise."""
    batch_id = uuid7()
    batch = NewBatch(
        id=batch_id,
        queue=queue or new_queue(),
        expected_size=size,
        failure_threshold=threshold,
        finalizer=finalizer_for(batch_id) if finalizer else None,
        metadata={"origin": "test"},
    )
    row = await harness.backend.create_batch(batch)
    assert row.status is BatchStatus.ACTIVE
    return batch


async def child(harness: Harness, batch: NewBatch, status: JobStatus) -> JobRow:
    """A child of ``batch`` in ``status`` (its hook not run)."""
    row, _ = await job_in(harness, status, metadata={"batch_id": str(batch.id)})
    return row


async def ended(harness: Harness, batch: NewBatch, status: JobStatus) -> list[BatchStatus]:
    """A child ends in ``status`` and its hook runs; the statuses the batches moved to."""
    await child(harness, batch, status)
    moved = await harness.backend.apply_batch_outcomes([BatchOutcome(batch.id, status)])
    return [t.status for t in moved]


async def batch_row(harness: Harness, batch: NewBatch) -> BatchRow:
    row = await harness.backend.get_batch(batch.id)
    assert row is not None
    return row


async def finalizers(harness: Harness, batch: NewBatch) -> list[JobRow]:
    """The finalizer jobs stored for ``batch`` (by its fixed id and its queue)."""
    assert batch.finalizer is not None
    jobs = await harness.backend.list_jobs(JobFilter(queue=batch.finalizer.queue))
    return [job for job in jobs if job.metadata.get(FINALIZES_KEY) == str(batch.id)]


# --- the row ---------------------------------------------------------------------------------
async def test_create_batch_stores_the_row_and_not_the_finalizer_job(harness: Harness) -> None:
    before = await harness.now()
    batch = await new_batch(harness, threshold=3, size=7)
    row = await batch_row(harness, batch)
    assert row.id == batch.id and row.queue == batch.queue
    assert row.status is BatchStatus.ACTIVE
    assert (row.expected_size, row.failure_threshold, row.consecutive_failures) == (7, 3, 0)
    assert row.finalizer_actor == "finalize" and row.finalizer_job_id is None
    assert row.completed_at is None and row.metadata == {"origin": "test"}
    assert between(row.created_at, before, await harness.now())
    assert await finalizers(harness, batch) == []


async def test_create_batch_with_an_existing_id_raises_value_error(harness: Harness) -> None:
    batch = await new_batch(harness)
    with pytest.raises(ValueError):
        await harness.backend.create_batch(batch)


async def test_create_batch_in_a_transaction_commits_with_its_children(harness: Harness) -> None:
    backend = harness.backend
    batch_id, queue = uuid7(), new_queue()
    async with backend.transaction() as conn:
        await backend.create_batch(NewBatch(batch_id, queue, 2, 1), connection=conn)
        child_args = args(queue=queue, metadata={"batch_id": str(batch_id)})
        await backend.enqueue_batch([child_args, child_args], connection=conn)
    assert (await backend.get_batch(batch_id)) is not None
    assert (await backend.count_batch_jobs(batch_id)).of(S.PENDING) == 2

    rolled_back = uuid7()
    with pytest.raises(RuntimeError):
        async with backend.transaction() as conn:
            await backend.create_batch(NewBatch(rolled_back, queue, 0), connection=conn)
            raise RuntimeError("the caller's transaction fails")
    assert await backend.get_batch(rolled_back) is None


# --- the outcome table -----------------------------------------------------------------------
async def test_a_success_resets_consecutive_failures(harness: Harness) -> None:
    batch = await new_batch(harness, threshold=3)
    await child(harness, batch, S.PENDING)  # keeps the batch active
    assert await ended(harness, batch, S.FAILED) == []
    assert await ended(harness, batch, S.FAILED) == []
    assert (await batch_row(harness, batch)).consecutive_failures == 2
    assert await ended(harness, batch, S.SUCCEEDED) == []
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ACTIVE, 0)


async def test_outcomes_of_one_call_apply_in_the_given_order(harness: Harness) -> None:
    backend = harness.backend
    first, second = await new_batch(harness, threshold=5), await new_batch(harness, threshold=5)
    for batch in (first, second):
        await child(harness, batch, S.PENDING)
    await backend.apply_batch_outcomes(
        [
            BatchOutcome(first.id, S.FAILED),
            BatchOutcome(second.id, S.SUCCEEDED),
            BatchOutcome(first.id, S.SUCCEEDED),
            BatchOutcome(second.id, S.FAILED),
        ]
    )
    assert (await batch_row(harness, first)).consecutive_failures == 0
    assert (await batch_row(harness, second)).consecutive_failures == 1


@pytest.mark.parametrize("status", [S.CANCELLED, S.CRASHED, S.ABANDONED])
async def test_cancelled_crashed_and_abandoned_children_leave_the_counter(
    harness: Harness, status: JobStatus
) -> None:
    batch = await new_batch(harness, threshold=2)
    await child(harness, batch, S.PENDING)
    await ended(harness, batch, S.FAILED)
    assert await ended(harness, batch, status) == []
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ACTIVE, 1)


async def test_non_terminal_statuses_are_ignored(harness: Harness) -> None:
    batch = await new_batch(harness, threshold=1)
    outcomes = [BatchOutcome(batch.id, s) for s in (S.PENDING, S.SCHEDULED, S.RUNNING)]
    assert await harness.backend.apply_batch_outcomes(outcomes) == []
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ACTIVE, 0)


async def test_a_batch_completes_once_no_child_is_pending_scheduled_or_running(
    harness: Harness,
) -> None:
    backend = harness.backend
    batch = await new_batch(harness, threshold=5)
    running = await child(harness, batch, S.RUNNING)
    assert await ended(harness, batch, S.SUCCEEDED) == []
    assert await ended(harness, batch, S.FAILED) == []
    assert (await batch_row(harness, batch)).status is BatchStatus.ACTIVE
    assert await backend.mark_succeeded(running.lease(), {"ok": True})
    before = await harness.now()
    moved = await backend.apply_batch_outcomes([BatchOutcome(batch.id, S.SUCCEEDED)])
    assert batch.finalizer is not None
    assert [(t.batch_id, t.status, t.cancelled_children) for t in moved] == [
        (batch.id, BatchStatus.COMPLETE, 0)
    ]
    assert moved[0].finalizer_job_id == batch.finalizer.job_id
    row = await batch_row(harness, batch)
    assert row.status is BatchStatus.COMPLETE
    assert between(row.completed_at, before, await harness.now())
    assert row.finalizer_job_id == batch.finalizer.job_id
    [final] = await finalizers(harness, batch)
    assert final.id == batch.finalizer.job_id and final.actor == "finalize"
    assert final.status is S.PENDING and final.payload == {"batch": str(batch.id)}
    assert "batch_id" not in final.metadata  # the finalizer is not a child
    assert (await backend.count_batch_jobs(batch.id)).total == 3


async def test_failures_abort_at_the_threshold_and_cancel_waiting_children_only(
    harness: Harness,
) -> None:
    backend = harness.backend
    batch = await new_batch(harness, threshold=2)
    pending = await child(harness, batch, S.PENDING)
    scheduled = await child(harness, batch, S.SCHEDULED)
    running = await child(harness, batch, S.RUNNING)
    other = await backend.enqueue(args(queue=batch.queue))  # not a child
    assert await ended(harness, batch, S.FAILED) == []
    await child(harness, batch, S.FAILED)
    before = await harness.now()
    moved = await backend.apply_batch_outcomes([BatchOutcome(batch.id, S.FAILED)])
    assert batch.finalizer is not None
    assert [(t.status, t.cancelled_children, t.finalizer_job_id) for t in moved] == [
        (BatchStatus.ABORTED, 2, batch.finalizer.job_id)
    ]
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ABORTED, 2)
    assert between(row.completed_at, before, await harness.now())
    for waiting in (pending, scheduled):
        job = await reload(backend, waiting.id)
        assert job.status is S.CANCELLED
        assert job.error_message == BATCH_ABORT_MESSAGE
        assert between(job.finished_at, before, await harness.now())
        last = (await backend.get_events(job.id))[-1]
        assert (last.kind, last.from_status, last.to_status) == (
            "state_change",
            waiting.status,
            S.CANCELLED,
        )
        assert last.detail["reason"] == BATCH_ABORT_MESSAGE
    assert (await reload(backend, running.id)).status is S.RUNNING
    assert (await reload(backend, other.id)).status is S.PENDING
    [final] = await finalizers(harness, batch)
    assert final.id == batch.finalizer.job_id
    # The running child finishes later: an aborted batch no longer moves.
    assert await backend.mark_succeeded(running.lease(), None)
    assert await backend.apply_batch_outcomes([BatchOutcome(batch.id, S.SUCCEEDED)]) == []
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ABORTED, 2)


async def test_a_batch_without_a_threshold_never_aborts(harness: Harness) -> None:
    batch = await new_batch(harness, threshold=None)
    await child(harness, batch, S.PENDING)
    for _ in range(3):
        assert await ended(harness, batch, S.FAILED) == []
    row = await batch_row(harness, batch)
    assert (row.status, row.consecutive_failures) == (BatchStatus.ACTIVE, 3)


async def test_a_batch_without_a_finalizer_completes_without_one(harness: Harness) -> None:
    batch = await new_batch(harness, finalizer=False)
    moved = await harness.backend.apply_batch_outcomes([])
    assert moved == []
    assert await ended(harness, batch, S.SUCCEEDED) == [BatchStatus.COMPLETE]
    row = await batch_row(harness, batch)
    assert row.finalizer_actor is None and row.finalizer_job_id is None


# --- exactly once ----------------------------------------------------------------------------
async def test_the_hook_twice_makes_one_finalizer(harness: Harness) -> None:
    backend = harness.backend
    batch = await new_batch(harness)
    await child(harness, batch, S.SUCCEEDED)
    await child(harness, batch, S.SUCCEEDED)
    outcome = BatchOutcome(batch.id, S.SUCCEEDED)
    first = await backend.apply_batch_outcomes([outcome])
    second = await backend.apply_batch_outcomes([outcome])
    assert [t.status for t in first] == [BatchStatus.COMPLETE] and second == []
    assert len(await finalizers(harness, batch)) == 1
    assert await backend.complete_stale_batches() == []
    assert len(await finalizers(harness, batch)) == 1


async def test_the_hook_after_the_stale_sweep_makes_no_second_finalizer(harness: Harness) -> None:
    backend = harness.backend
    batch = await new_batch(harness)
    await child(harness, batch, S.FAILED)  # its hook never ran
    swept = await backend.complete_stale_batches()
    assert [(t.batch_id, t.status) for t in swept] == [(batch.id, BatchStatus.COMPLETE)]
    assert await backend.apply_batch_outcomes([BatchOutcome(batch.id, S.FAILED)]) == []
    assert len(await finalizers(harness, batch)) == 1
    assert (await batch_row(harness, batch)).consecutive_failures == 0


async def test_ids_without_a_row_change_nothing(harness: Harness) -> None:
    backend = harness.backend
    rowless = uuid7()
    job, _ = await job_in(harness, S.FAILED, metadata={"batch_id": str(rowless)})
    outcomes = [BatchOutcome(rowless, S.FAILED), BatchOutcome(uuid4(), S.SUCCEEDED)]
    assert await backend.apply_batch_outcomes(outcomes) == []
    assert await backend.get_batch(rowless) is None
    assert (await reload(backend, job.id)).status is S.FAILED
    assert (await backend.count_batch_jobs(rowless)).of(S.FAILED) == 1


async def test_a_finalizer_whose_unique_key_is_held_is_refused_and_the_batch_still_ends(
    harness: Harness,
) -> None:
    backend = harness.backend
    key = f"report-{uuid4().hex}"
    holder = await backend.enqueue(args(queue=new_queue(), unique_key=key))
    batch_id = uuid7()
    batch = NewBatch(batch_id, new_queue(), 1, finalizer=finalizer_for(batch_id, unique_key=key))
    await backend.create_batch(batch)
    moved = await ended(harness, batch, S.SUCCEEDED)
    assert moved == [BatchStatus.COMPLETE]
    row = await batch_row(harness, batch)
    assert row.finalizer_job_id is None and row.finalizer_actor == "finalize"
    assert await finalizers(harness, batch) == []
    assert (await reload(backend, holder.id)).status is S.PENDING


# --- counts and lists ------------------------------------------------------------------------
async def test_count_batch_jobs_counts_the_children_by_status(harness: Harness) -> None:
    backend = harness.backend
    batch = await new_batch(harness)
    for status in (S.PENDING, S.PENDING, S.SCHEDULED, S.RUNNING, S.SUCCEEDED, S.FAILED):
        await child(harness, batch, status)
    await backend.enqueue(args(queue=batch.queue))  # same queue, not a child
    other = await new_batch(harness)
    await child(harness, other, S.PENDING)
    counts = await backend.count_batch_jobs(batch.id)
    assert dict(counts.by_status) == {
        S.PENDING: 2,
        S.SCHEDULED: 1,
        S.RUNNING: 1,
        S.SUCCEEDED: 1,
        S.FAILED: 1,
    }
    assert (counts.total, counts.pending) == (6, 4)
    assert await backend.count_batch_jobs(uuid4()) == BatchCounts()


async def test_list_batches_filters_newest_first_with_counts(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    old = await new_batch(harness, queue=queue)
    await child(harness, old, S.SUCCEEDED)
    await backend.apply_batch_outcomes([BatchOutcome(old.id, S.SUCCEEDED)])  # complete
    await harness.travel(1)
    middle = await new_batch(harness, queue=queue)
    await child(harness, middle, S.PENDING)
    await child(harness, middle, S.FAILED)
    await harness.travel(1)
    new = await new_batch(harness, queue=queue)
    elsewhere = await new_batch(harness)

    def ids(found: list[tuple[BatchRow, BatchCounts]]) -> list[UUID]:
        return [row.id for row, _ in found]

    listed = await backend.list_batches(BatchFilter(queue=queue))
    assert ids(listed) == [new.id, middle.id, old.id]
    counts = {row.id: c for row, c in listed}
    assert dict(counts[middle.id].by_status) == {S.PENDING: 1, S.FAILED: 1}
    assert dict(counts[old.id].by_status) == {S.SUCCEEDED: 1}
    assert counts[new.id].total == 0
    assert ids(await backend.list_batches(BatchFilter(queue=queue, active=True))) == [
        new.id,
        middle.id,
    ]
    assert ids(await backend.list_batches(BatchFilter(queue=queue, active=False))) == [old.id]
    assert ids(await backend.list_batches(BatchFilter(queue=queue, limit=1))) == [new.id]
    assert ids(await backend.list_batches(BatchFilter(batch_id=middle.id))) == [middle.id]
    assert ids(await backend.list_batches(BatchFilter(batch_id=elsewhere.id, queue=queue))) == []
    assert elsewhere.id in ids(await backend.list_batches(BatchFilter(active=True, limit=50)))


# --- the sweeps ------------------------------------------------------------------------------
async def test_complete_stale_batches_completes_empty_and_finished_batches_only(
    harness: Harness,
) -> None:
    backend = harness.backend
    empty = await new_batch(harness, size=0)
    finished = await new_batch(harness, size=1)
    await child(harness, finished, S.CANCELLED)
    waiting = await new_batch(harness, size=1)
    await child(harness, waiting, S.SCHEDULED)
    swept = await backend.complete_stale_batches()
    assert {(t.batch_id, t.status) for t in swept} == {
        (empty.id, BatchStatus.COMPLETE),
        (finished.id, BatchStatus.COMPLETE),
    }
    for batch in (empty, finished):
        assert batch.finalizer is not None
        row = await batch_row(harness, batch)
        assert row.status is BatchStatus.COMPLETE
        assert row.finalizer_job_id == batch.finalizer.job_id
        assert len(await finalizers(harness, batch)) == 1
    assert (await batch_row(harness, waiting)).status is BatchStatus.ACTIVE
    assert await backend.complete_stale_batches() == []


async def test_complete_stale_batches_takes_the_oldest_first_up_to_the_limit(
    harness: Harness,
) -> None:
    backend = harness.backend
    made = []
    for _ in range(3):
        made.append(await new_batch(harness, finalizer=False))
        await harness.travel(1)
    first = await backend.complete_stale_batches(limit=2)
    assert [t.batch_id for t in first] == [made[0].id, made[1].id]
    second = await backend.complete_stale_batches(limit=2)
    assert [t.batch_id for t in second] == [made[2].id]


async def test_prune_old_batches_deletes_ended_batches_without_children_past_the_cutoff(
    harness: Harness,
) -> None:
    backend = harness.backend
    ended_empty = await new_batch(harness, finalizer=False)
    aborted = await new_batch(harness, threshold=1, finalizer=False)
    with_child = await new_batch(harness, finalizer=False)
    active = await new_batch(harness, finalizer=False)
    await child(harness, active, S.PENDING)
    assert await ended(harness, aborted, S.FAILED) == [BatchStatus.ABORTED]
    assert await ended(harness, with_child, S.SUCCEEDED) == [BatchStatus.COMPLETE]
    await backend.complete_stale_batches()  # ended_empty completes
    await harness.travel(KEEP.total_seconds() - MARGIN)
    assert await backend.prune_old_batches(KEEP) == 0  # not old enough yet
    await harness.travel(2 * MARGIN)
    # aborted's failed child is still in the jobs table, as is with_child's.
    assert await backend.prune_old_batches(KEEP) == 1
    assert await backend.get_batch(ended_empty.id) is None
    for kept in (aborted, with_child, active):
        assert await backend.get_batch(kept.id) is not None


async def test_prune_old_batches_works_in_batches(harness: Harness) -> None:
    backend = harness.backend
    made = [await new_batch(harness, finalizer=False) for _ in range(5)]
    assert len(await backend.complete_stale_batches()) >= 5
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert await backend.prune_old_batches(KEEP, batch_size=2) == 5
    for batch in made:
        assert await backend.get_batch(batch.id) is None
    with pytest.raises(ValueError):
        await backend.prune_old_batches(KEEP, batch_size=0)


async def test_a_batchs_jobs_are_listed_by_status_latest_finished_first(harness: Harness) -> None:
    batch = await new_batch(harness)
    failed = [await child(harness, batch, S.FAILED)]
    await harness.travel(5)
    waiting = await child(harness, batch, S.PENDING)
    failed.append(await child(harness, batch, S.CRASHED))
    await child(harness, other := await new_batch(harness), S.FAILED)  # another batch's
    await job_in(harness, S.FAILED)  # outside any batch
    backend = harness.backend
    latest = await backend.list_batch_jobs(batch.id, {S.FAILED, S.CRASHED})
    assert [job.id for job in latest] == [failed[1].id, failed[0].id]
    assert [job.id for job in await backend.list_batch_jobs(batch.id, limit=1)] == [failed[1].id]
    every = {job.id for job in await backend.list_batch_jobs(batch.id)}
    assert every == {failed[0].id, failed[1].id, waiting.id}
    assert await backend.list_batch_jobs(batch.id, {S.SUCCEEDED}) == []
    assert len(await backend.list_batch_jobs(other.id)) == 1


async def test_the_hook_looks_for_unfinished_children_once_every_expected_outcome_came(
    harness: Harness,
) -> None:
    # Three children expected: the first two outcomes do not end the batch, even with no
    # child left waiting (the third was never enqueued); the stale sweep ends it.
    batch = await new_batch(harness, size=3)
    assert await ended(harness, batch, S.SUCCEEDED) == []
    assert await ended(harness, batch, S.SUCCEEDED) == []
    assert (await batch_row(harness, batch)).status is BatchStatus.ACTIVE
    [swept] = await harness.backend.complete_stale_batches()
    assert swept.batch_id == batch.id and swept.status is BatchStatus.COMPLETE
    # Counted down to 0, the hook ends the batch at its last outcome, as with no count.
    counted = await new_batch(harness, size=2)
    assert await ended(harness, counted, S.FAILED) == []
    assert await ended(harness, counted, S.SUCCEEDED) == [BatchStatus.COMPLETE]
    # A child counted twice (a retried one) never ends a batch while another still runs.
    early = await new_batch(harness, size=2)
    assert await ended(harness, early, S.FAILED) == []
    await child(harness, early, S.RUNNING)
    twice = [BatchOutcome(early.id, S.FAILED)]  # the failed child's second outcome
    assert await harness.backend.apply_batch_outcomes(twice) == []
    assert (await batch_row(harness, early)).status is BatchStatus.ACTIVE
