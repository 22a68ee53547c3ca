"""JobsClient's batches over both backends: children tagged, a row only with a policy or a
finalizer, all or nothing, streamed enqueues, and wait_for_batch's answers.

Children are ended here as a worker ends them: a dispatch, the terminal write, then the
batch hook (``apply_batch_outcomes``) with the committed outcomes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import BaseModel

from taskq_core.actors import actor
from taskq_core.backend.protocol import Backend, JobFilter, JobRow, Success
from taskq_core.backend.protocol.batches import (
    BATCH_ID_KEY,
    FINALIZES_KEY,
    BatchFilter,
    BatchOutcome,
    BatchStatus,
)
from taskq_core.batches import AbortBatchAfter, BatchEnqueued
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.errors import (
    BatchAbortedError,
    ConfigError,
    EmptyBatchError,
    PayloadValidationError,
    SingletonCollisionError,
)
from taskq_core.retry import Snooze
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, LEASE, lease


class Part(BaseModel):
    n: int


@actor(queue="parts")
async def part(payload: Part) -> None:
    return None


@actor(queue="parts")
async def summary(payload: Part) -> None:
    return None


def items(count: int, *, first: int = 0) -> list[EnqueueItem]:
    return [EnqueueItem(part, Part(n=n)) for n in range(first, first + count)]


async def all_jobs(backend: Backend) -> list[JobRow]:
    return await backend.list_jobs(JobFilter(limit=None))


async def batch_rows(backend: Backend) -> list[Any]:
    return await backend.list_batches(BatchFilter(limit=100))


async def finish(backend: Backend, count: int, status: JobStatus) -> list[JobRow]:
    """Claim ``count`` jobs of the parts queue and end them as ``status`` (succeeded or
    failed), then run the batch hook for them as a worker does."""
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, ["parts"], count, LEASE)
    assert len(claimed) == count
    if status is JobStatus.SUCCEEDED:
        written = await backend.mark_succeeded_many(
            worker, [Success(row.id, row.attempt, None) for row in claimed]
        )
        assert written == {row.id for row in claimed}
    else:
        for row in claimed:
            ended = await backend.mark_failed_or_retry(lease(row), BOOM, None)
            assert ended is not None and ended.status is JobStatus.FAILED
    outcomes = [BatchOutcome(UUID(row.metadata[BATCH_ID_KEY]), status) for row in claimed]
    await backend.apply_batch_outcomes(outcomes)
    return claimed


# --- enqueue -----------------------------------------------------------------------------------
async def test_a_plain_batch_is_not_tagged_and_makes_no_row(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        rows = await client.enqueue_batch(items(3))
    assert all(BATCH_ID_KEY not in row.metadata for row in rows)
    assert await batch_rows(harness.backend) == []


async def test_a_batch_id_alone_tags_every_child_and_makes_no_row(harness: Harness) -> None:
    given = uuid4()
    async with JobsClient(backend=harness.backend) as client:
        rows = await client.enqueue_batch(
            [*items(2), (part, {"n": 9})], batch_id=str(given).upper()
        )
        assert await client.get_batch(given) is None
    assert [row.metadata[BATCH_ID_KEY] for row in rows] == [str(given)] * 3
    assert (await harness.backend.count_batch_jobs(given)).total == 3
    assert await batch_rows(harness.backend) == []


async def test_a_policy_makes_the_row_with_its_threshold_and_size(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        rows = await client.enqueue_batch(
            [EnqueueItem(part, Part(n=1), metadata={"tenant": "t"}), *items(2)],
            failure_policy=AbortBatchAfter(2),
        )
        ids = {row.metadata[BATCH_ID_KEY] for row in rows}
        assert len(ids) == 1
        batch_id = UUID(ids.pop())
        row = await client.get_batch(batch_id)
    assert rows[0].metadata == {"tenant": "t", BATCH_ID_KEY: str(batch_id)}
    assert row is not None
    assert (row.status, row.queue, row.expected_size) == (BatchStatus.ACTIVE, "parts", 3)
    assert (row.failure_threshold, row.consecutive_failures) == (2, 0)
    assert (row.finalizer_actor, row.finalizer_job_id) == (None, None)


async def test_a_finalizer_makes_the_row_and_is_enqueued_once_the_children_end(
    harness: Harness,
) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        finalizer = EnqueueItem(summary, Part(n=0), metadata={BATCH_ID_KEY: "ignored", "k": 1})
        rows = await client.enqueue_batch(items(3), finalizer=finalizer)
        batch_id = UUID(rows[0].metadata[BATCH_ID_KEY])
        row = await client.get_batch(batch_id)
        assert row is not None
        assert (row.failure_threshold, row.finalizer_actor) == (None, "summary")
        assert [job.actor for job in await all_jobs(backend)] == ["part"] * 3
        await finish(backend, 3, JobStatus.SUCCEEDED)
        ended = await client.get_batch(batch_id)
    assert ended is not None and ended.status is BatchStatus.COMPLETE
    [made] = [job for job in await all_jobs(backend) if job.actor == "summary"]
    assert made.id == ended.finalizer_job_id
    assert made.metadata == {"k": 1, FINALIZES_KEY: str(batch_id)}  # not a child of it
    assert made.status is JobStatus.PENDING and made.queue == "parts"
    assert (await backend.count_batch_jobs(batch_id)).total == 3


async def test_an_empty_batch_with_a_policy_makes_an_empty_row(harness: Harness) -> None:
    given = uuid4()
    async with JobsClient(backend=harness.backend) as client:
        made = await client.enqueue_batch([], failure_policy=AbortBatchAfter(1), batch_id=given)
        assert made == []
        row = await client.get_batch(given)
    assert row is not None and row.expected_size == 0 and row.status is BatchStatus.ACTIVE


@pytest.mark.parametrize(
    "bad",
    [
        {"failure_policy": 3},
        {"finalizer": EnqueueItem(summary, {"n": "many"})},
        {"batch_id": "not-a-uuid", "failure_policy": AbortBatchAfter(1)},
    ],
    ids=["policy", "finalizer-payload", "batch-id"],
)
async def test_bad_batch_options_fail_before_any_insert(
    harness: Harness, bad: dict[str, Any]
) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises((ConfigError, PayloadValidationError)):
            await client.enqueue_batch(items(2), **bad)
    assert await all_jobs(harness.backend) == []
    assert await batch_rows(harness.backend) == []


async def test_a_bad_child_stores_neither_the_row_nor_any_child(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(PayloadValidationError):
            await client.enqueue_batch(
                [*items(5), EnqueueItem(part, {"n": "x"})],
                failure_policy=AbortBatchAfter(1),
                finalizer=EnqueueItem(summary, Part(n=0)),
            )
    assert await all_jobs(harness.backend) == []
    assert await batch_rows(harness.backend) == []


async def test_a_unique_clash_stores_neither_the_row_nor_any_child(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        holder = await client.enqueue(part, Part(n=0), unique_key="only-one")
        with pytest.raises(SingletonCollisionError):
            await client.enqueue_batch(
                [*items(3), EnqueueItem(part, Part(n=4), unique_key="only-one")],
                finalizer=EnqueueItem(summary, Part(n=0)),
            )
    assert [job.id for job in await all_jobs(harness.backend)] == [holder.id]
    assert await batch_rows(harness.backend) == []


async def test_a_batch_id_already_taken_stores_no_child(harness: Harness) -> None:
    given = uuid4()
    async with JobsClient(backend=harness.backend) as client:
        await client.enqueue_batch(items(1), failure_policy=AbortBatchAfter(1), batch_id=given)
        with pytest.raises(ValueError, match="already exists"):
            await client.enqueue_batch(items(4), failure_policy=AbortBatchAfter(1), batch_id=given)
    assert len(await all_jobs(harness.backend)) == 1


async def test_a_batch_in_the_callers_transaction_goes_with_it(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        with pytest.raises(RuntimeError, match="caller gave up"):
            async with backend.transaction() as conn:
                await client.enqueue_batch(
                    items(3), failure_policy=AbortBatchAfter(1), connection=conn
                )
                raise RuntimeError("caller gave up")
        assert await all_jobs(backend) == [] and await batch_rows(backend) == []
        async with backend.transaction() as conn:
            rows = await client.enqueue_batch(
                items(3), failure_policy=AbortBatchAfter(1), connection=conn
            )
    assert len(await all_jobs(backend)) == 3
    assert await client_row_status(backend, rows) is BatchStatus.ACTIVE


async def client_row_status(backend: Backend, rows: list[JobRow]) -> BatchStatus | None:
    row = await backend.get_batch(UUID(rows[0].metadata[BATCH_ID_KEY]))
    return None if row is None else row.status


# --- streaming ---------------------------------------------------------------------------------
def generated(count: int) -> Iterator[EnqueueItem | tuple[Any, Any]]:
    """A generator: the batch is never a list in memory."""
    for n in range(count):
        yield (part, {"n": n}) if n % 2 else EnqueueItem(part, Part(n=n))


async def test_streaming_a_generator_in_chunks_makes_one_batch(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        made = await client.enqueue_batch_streaming(
            generated(2_500), chunk_size=1_000, finalizer=EnqueueItem(summary, Part(n=0))
        )
        row = await client.get_batch(made.batch_id)
    assert isinstance(made, BatchEnqueued) and made.count == 2_500
    assert row is not None and (row.expected_size, row.queue) == (2_500, "parts")
    counts = await backend.count_batch_jobs(made.batch_id)
    assert counts.by_status == {JobStatus.PENDING: 2_500}
    jobs = await all_jobs(backend)
    assert sorted(job.payload["n"] for job in jobs) == list(range(2_500))


async def test_streaming_with_a_row_is_all_or_nothing(harness: Harness) -> None:
    def with_a_bad_one() -> Iterator[Any]:
        yield from generated(1_500)
        yield (part, {"n": "bad"})

    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(PayloadValidationError):
            await client.enqueue_batch_streaming(
                with_a_bad_one(), chunk_size=500, failure_policy=AbortBatchAfter(3)
            )
    assert await all_jobs(harness.backend) == []
    assert await batch_rows(harness.backend) == []


async def test_streaming_without_a_row_commits_chunk_by_chunk(harness: Harness) -> None:
    def with_a_bad_one() -> Iterator[Any]:
        yield from generated(25)
        yield (part, {"n": "bad"})

    given = uuid4()
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(PayloadValidationError):
            await client.enqueue_batch_streaming(with_a_bad_one(), chunk_size=10, batch_id=given)
        made = await client.enqueue_batch_streaming(generated(3), chunk_size=2)
    # The two whole chunks before the bad one stay; the bad one's chunk does not.
    assert (await harness.backend.count_batch_jobs(given)).total == 20
    assert made.count == 3 and (await harness.backend.count_batch_jobs(made.batch_id)).total == 3


@pytest.mark.parametrize("size", [0, 1_001])
async def test_streaming_chunks_are_1_to_1000(harness: Harness, size: int) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(ConfigError, match="chunk_size"):
            await client.enqueue_batch_streaming(generated(3), chunk_size=size)
    assert await all_jobs(harness.backend) == []


# --- waiting -----------------------------------------------------------------------------------
async def test_waiting_returns_the_counts_once_every_child_ended(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch(items(4), failure_policy=AbortBatchAfter(3))
        batch_id = UUID(rows[0].metadata[BATCH_ID_KEY])
        with pytest.raises(Snooze) as snoozed:
            await client.wait_for_batch(batch_id, snooze=timedelta(seconds=7))
        assert snoozed.value.delay == timedelta(seconds=7)
        with pytest.raises(TimeoutError):
            await client.wait_for_batch(batch_id, timeout=0.2, poll_interval=0.01)
        await finish(backend, 2, JobStatus.FAILED)
        await finish(backend, 2, JobStatus.SUCCEEDED)
        done = await client.wait_for_batch(batch_id, timeout=10, snooze=timedelta(seconds=7))
    assert done.status is BatchStatus.COMPLETE
    assert (done.total, done.pending, done.succeeded, done.failed) == (4, 0, 2, 2)


async def test_waiting_on_an_aborted_batch_raises_once_none_runs(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch(items(5), failure_policy=AbortBatchAfter(2))
        batch_id = UUID(rows[0].metadata[BATCH_ID_KEY])
        worker = uuid4()
        [running] = await backend.dispatch_batch(worker, ["parts"], 1, LEASE)
        await finish(backend, 2, JobStatus.FAILED)  # the abort cancels the 2 still waiting
        with pytest.raises(Snooze):  # one child still runs
            await client.wait_for_batch(batch_id, snooze=timedelta(seconds=1))
        await backend.mark_succeeded_many(worker, [Success(running.id, running.attempt, None)])
        with pytest.raises(BatchAbortedError):
            await client.wait_for_batch(batch_id, timeout=10)
    counts = await backend.count_batch_jobs(batch_id)
    assert counts.by_status == {
        JobStatus.SUCCEEDED: 1,
        JobStatus.FAILED: 2,
        JobStatus.CANCELLED: 2,
    }


async def test_waiting_on_a_batch_with_no_child(harness: Harness) -> None:
    tracked, untracked = uuid4(), uuid4()
    async with JobsClient(backend=harness.backend) as client:
        await client.enqueue_batch([], finalizer=EnqueueItem(summary, Part(n=0)), batch_id=tracked)
        empty = await client.wait_for_batch(tracked, timeout=10)
        assert (empty.total, empty.status) == (0, BatchStatus.ACTIVE)
        with pytest.raises(EmptyBatchError):
            await client.wait_for_batch(untracked, timeout=10)
        nothing = await client.wait_for_batch(untracked, timeout=10, on_empty="ok")
        assert (nothing.total, nothing.status) == (0, None)
        with pytest.raises(ConfigError, match="on_empty"):
            await client.wait_for_batch(untracked, on_empty="maybe")  # type: ignore[arg-type]


async def test_waiting_for_more_children_than_exist_raises(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        made = await client.enqueue_batch_streaming(generated(2))
        await finish(backend, 2, JobStatus.SUCCEEDED)
        with pytest.raises(EmptyBatchError, match="of 3"):
            await client.wait_for_batch(made.batch_id, timeout=10, expect_at_least=3)
        done = await client.wait_for_batch(made.batch_id, timeout=10, expect_at_least=2)
    assert (done.status, done.succeeded) == (None, 2)
