"""Batches through a whole in-process worker, on both backends: the hook after each child's
terminal write aborts a failing batch (its waiting children cancelled) and enqueues the
finalizer once; ``--until-idle`` ends only after the finalizer ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from uuid import UUID

import pytest

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import Backend, JobFilter, JobRow
from taskq_core.backend.protocol.batches import (
    BATCH_ABORT_MESSAGE,
    BATCH_ID_KEY,
    FINALIZES_KEY,
    BatchOutcome,
    BatchStatus,
)
from taskq_core.batches import AbortBatchAfter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.constants import EXIT_IDLE_FAILURES, EXIT_OK
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

ONCE = RetryPolicy(kind="non_retryable")


@actor(retry=ONCE)
async def child(payload: dict[str, Any]) -> int:
    if payload.get("fail"):
        raise RuntimeError(f"child {payload['n']} failed")
    return int(payload["n"])


@actor(retry=ONCE)
async def finalize(payload: dict[str, Any]) -> str:
    return "finalized"


ACTORS = [child, finalize]


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


async def run(worker: Worker) -> int:
    return await asyncio.wait_for(worker.run(), 60)


async def jobs(backend: Backend) -> list[JobRow]:
    return await backend.list_jobs(JobFilter(limit=None))


def finalizers_of(rows: list[JobRow], batch_id: UUID) -> list[JobRow]:
    return [row for row in rows if row.metadata.get(FINALIZES_KEY) == str(batch_id)]


def children_of(rows: list[JobRow], batch_id: UUID) -> list[JobRow]:
    return [row for row in rows if row.metadata.get(BATCH_ID_KEY) == str(batch_id)]


async def test_a_failing_batch_aborts_and_cancels_its_waiting_children(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        made = await client.enqueue_batch(
            [EnqueueItem(child, {"n": n, "fail": True}) for n in range(10)],
            failure_policy=AbortBatchAfter(2),
            finalizer=EnqueueItem(finalize, {}),
        )
    batch_id = UUID(made[0].metadata[BATCH_ID_KEY])
    # One consumer, nothing claimed ahead: at most one child runs past the abort.
    code = await run(make_worker(backend, ACTORS, max_concurrency=1, prefetch=0))
    assert code == EXIT_IDLE_FAILURES
    row = await backend.get_batch(batch_id)
    assert row is not None and row.status is BatchStatus.ABORTED
    everything = await jobs(backend)
    children = children_of(everything, batch_id)
    failed = [job for job in children if job.status is JobStatus.FAILED]
    cancelled = [job for job in children if job.status is JobStatus.CANCELLED]
    assert 2 <= len(failed) <= 3 and len(failed) + len(cancelled) == 10
    assert {job.error_message for job in cancelled} == {BATCH_ABORT_MESSAGE}
    [final] = finalizers_of(everything, batch_id)
    assert final.id == row.finalizer_job_id and final.status is JobStatus.SUCCEEDED


async def test_a_succeeding_batch_runs_its_finalizer_once_after_every_child(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        made = await client.enqueue_batch(
            [EnqueueItem(child, {"n": n}) for n in range(60)],
            failure_policy=AbortBatchAfter(1),
            finalizer=EnqueueItem(finalize, {}),
        )
    batch_id = UUID(made[0].metadata[BATCH_ID_KEY])
    assert await run(make_worker(backend, ACTORS, max_concurrency=8)) == EXIT_OK
    row = await backend.get_batch(batch_id)
    assert row is not None and row.status is BatchStatus.COMPLETE
    everything = await jobs(backend)
    children = children_of(everything, batch_id)
    assert {job.status for job in children} == {JobStatus.SUCCEEDED} and len(children) == 60
    [final] = finalizers_of(everything, batch_id)
    assert final.status is JobStatus.SUCCEEDED and final.result == "finalized"
    ended = [job.finished_at for job in children]
    assert final.started_at is not None and None not in ended
    assert max(at for at in ended if at is not None) <= final.started_at


@pytest.mark.parametrize("last", ["succeeds", "fails"])
async def test_until_idle_ends_only_after_the_finalizer_ran(
    backend: Backend, make_worker: Callable[..., Worker], last: str
) -> None:
    """The last child's hook enqueues the finalizer while the child is still held, so the
    drain never sees the queue empty in between; through the completer's flush (a success)
    and through the consumer's own write (a failure)."""
    for round_ in range(5):
        async with JobsClient(backend=backend) as client:
            made = await client.enqueue_batch(
                [EnqueueItem(child, {"n": n, "fail": last == "fails"}) for n in range(3)],
                finalizer=EnqueueItem(finalize, {"round": round_}),
            )
        batch_id = UUID(made[0].metadata[BATCH_ID_KEY])
        code = await run(make_worker(backend, ACTORS, max_concurrency=4))
        assert code == (EXIT_OK if last == "succeeds" else EXIT_IDLE_FAILURES)
        [final] = finalizers_of(await jobs(backend), batch_id)
        assert final.status is JobStatus.SUCCEEDED, f"round {round_}: {final.status}"


class SlowBatchHook(InMemoryBackend):
    """A memory backend whose batch hook answers late, as a busy database does: the drain
    polls many times while the finalizer's insert is in flight."""

    async def apply_batch_outcomes(self, outcomes: Sequence[BatchOutcome]) -> Any:
        await asyncio.sleep(0.3)  # six idle polls (0.05 s)
        return await super().apply_batch_outcomes(outcomes)


@pytest.mark.parametrize("last", ["succeeds", "fails"])
async def test_a_slow_hook_still_keeps_the_drain_from_ending_before_the_finalizer(
    make_worker: Callable[..., Worker], last: str
) -> None:
    backend = SlowBatchHook()
    async with JobsClient(backend=backend) as client:
        made = await client.enqueue_batch(
            [EnqueueItem(child, {"n": 1, "fail": last == "fails"})],
            finalizer=EnqueueItem(finalize, {}),
        )
    batch_id = UUID(made[0].metadata[BATCH_ID_KEY])
    await run(make_worker(backend, ACTORS))
    [final] = finalizers_of(await jobs(backend), batch_id)
    assert final.status is JobStatus.SUCCEEDED
    await backend.close()
