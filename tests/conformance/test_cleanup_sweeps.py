"""The leader's bounded cleanup sweeps on every backend: result expiry in batches, stale worker
rows, and the queues that hold waiting jobs."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import WorkerInfo
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import GRACE, LEASE, args, job_in, new_queue, reload, running_job

SILENCE = timedelta(hours=1)
MARGIN = 10


def info(worker_id: UUID) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id, hostname="box", pid=1, queues=["default"], actors=[], concurrency=1
    )


async def _worker_ids(harness: Harness) -> set[UUID]:
    return {row.id for row in await harness.backend.list_workers()}


# --- result expiry ---------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 2, 5, 100])
async def test_result_expiry_clears_every_expired_result_whatever_the_batch_size(
    harness: Harness, batch_size: int
) -> None:
    backend = harness.backend
    expiring = []
    for _ in range(5):
        job, _ = await running_job(backend, result_ttl=timedelta(minutes=10))
        assert await backend.mark_succeeded(job.lease(), {"big": "result"})
        expiring.append(job.id)
    kept, _ = await running_job(backend, result_ttl=timedelta(days=1))
    assert await backend.mark_succeeded(kept.lease(), {"kept": True})
    assert await backend.expire_results(batch_size) == 0
    await harness.travel(600 + MARGIN)
    batches: list[int] = []
    assert await backend.expire_results(batch_size, on_batch=batches.append) == 5
    # Every batch reported as it commits; the last one is the short (maybe empty) one.
    full, last = divmod(5, batch_size)
    assert batches == [batch_size] * full + [last]
    for job_id in expiring:
        row = await reload(backend, job_id)
        assert (row.result, row.result_expires_at, row.status) == (
            None,
            None,
            JobStatus.SUCCEEDED,
        )
    assert (await reload(backend, kept.id)).result == {"kept": True}
    assert await backend.expire_results(batch_size) == 0


async def test_sweeps_refuse_a_batch_size_below_one(harness: Harness) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        await harness.backend.expire_results(0)
    with pytest.raises(ValueError, match="batch_size"):
        await harness.backend.delete_stale_workers(SILENCE, 0)


# --- stale workers ---------------------------------------------------------------------------
async def test_workers_silent_past_the_cutoff_are_deleted_stopped_or_vanished(
    harness: Harness,
) -> None:
    backend = harness.backend
    stopped, vanished, fresh = uuid4(), uuid4(), uuid4()
    for worker in (stopped, vanished):
        await backend.register_worker(info(worker))
    await backend.mark_worker_stopped(stopped)
    await harness.travel(SILENCE.total_seconds() - MARGIN)
    await backend.register_worker(info(fresh))
    assert await backend.delete_stale_workers(SILENCE) == 0
    await harness.travel(2 * MARGIN)
    assert await backend.delete_stale_workers(SILENCE) == 2
    assert await _worker_ids(harness) == {fresh}
    assert await backend.delete_stale_workers(SILENCE) == 0


async def test_a_heartbeat_keeps_a_worker_row(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(SILENCE.total_seconds() - MARGIN)
    await backend.heartbeat(worker, LEASE)
    await harness.travel(2 * MARGIN)
    assert await backend.delete_stale_workers(SILENCE) == 0
    assert await _worker_ids(harness) == {worker}


async def test_a_silent_worker_holding_a_running_job_stays_until_the_job_is_reclaimed(
    harness: Harness,
) -> None:
    backend = harness.backend
    holder, idle = uuid4(), uuid4()
    for worker in (holder, idle):
        await backend.register_worker(info(worker))
    job, _ = await running_job(backend, worker=holder)
    await harness.travel(SILENCE.total_seconds() + MARGIN)
    assert await backend.delete_stale_workers(SILENCE) == 1
    assert await _worker_ids(harness) == {holder}
    assert (await reload(backend, job.id)).locked_by_worker == holder
    assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    assert await backend.delete_stale_workers(SILENCE) == 1
    assert await _worker_ids(harness) == set()


async def test_stale_workers_go_in_batches(harness: Harness) -> None:
    backend = harness.backend
    for _ in range(5):
        await backend.register_worker(info(uuid4()))
    await harness.travel(SILENCE.total_seconds() + MARGIN)
    assert await backend.delete_stale_workers(SILENCE, batch_size=2) == 5
    assert await _worker_ids(harness) == set()


@pytest.mark.parametrize("older_than", [timedelta(0), -SILENCE])
async def test_a_cutoff_that_is_not_in_the_past_is_refused(
    harness: Harness, older_than: timedelta
) -> None:
    worker = uuid4()
    await harness.backend.register_worker(info(worker))
    with pytest.raises(ValueError, match="older_than"):
        await harness.backend.delete_stale_workers(older_than)
    assert await _worker_ids(harness) == {worker}


# --- waiting queues --------------------------------------------------------------------------
async def test_waiting_queues_are_the_sorted_queues_with_pending_jobs(harness: Harness) -> None:
    backend = harness.backend
    assert await backend.list_waiting_queues() == []
    first, second, later = sorted(new_queue() for _ in range(3))
    await backend.enqueue(args(queue=second))
    await backend.enqueue(args(queue=second))
    await backend.enqueue(args(queue=first, fairness_key="tenant-1"))
    await backend.enqueue(args(queue=later, delay=timedelta(minutes=5)))
    await job_in(harness, JobStatus.SUCCEEDED)
    await running_job(backend)
    assert await backend.list_waiting_queues() == [first, second]
    # A scheduled job counts once it comes due and is promoted.
    await harness.travel(300 + MARGIN)
    assert await backend.promote_scheduled_jobs() == 1
    assert await backend.list_waiting_queues() == [first, second, later]
    # A queue whose pending jobs were all claimed is no longer waiting.
    claimed = await backend.dispatch_batch(uuid4(), [second], 10, LEASE)
    assert len(claimed) == 2
    assert await backend.list_waiting_queues() == [first, later]
