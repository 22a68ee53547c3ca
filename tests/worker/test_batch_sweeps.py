"""The leader's batch passes, run_once each on the memory backend and a FakeClock: the
maintenance sweep ends batches no hook ended (children ended by no worker, empty batches),
many at a time; the prune deletes ended batch rows past the longest retention once their
children are archived, and keeps younger ones."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core.backend.protocol import JobFilter, Success
from taskq_core.backend.protocol.batches import BATCH_ID_KEY, FINALIZES_KEY, BatchStatus
from taskq_core.batches import AbortBatchAfter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.clock import FakeClock
from taskq_core.retention import prune_policy
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from taskq_core.worker.sweeps.prune import PruneSweep, batch_retention
from taskq_core.worker.sweeps.stale_batches import STALE_BATCHES_PER_CALL
from tests.conformance.states import LEASE
from tests.worker.sweep_support import MIDNIGHT, memory_deps


def setup(**settings: object) -> WorkerDeps:
    return memory_deps(FakeClock(MIDNIGHT), **settings)


async def batch_ended_by_no_hook(deps: WorkerDeps, children: int = 3) -> UUID:
    """A batch with a finalizer whose children all succeeded without the batch hook (as
    when their worker died between the write and the hook)."""
    backend = deps.backend
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch(
            [("work", {"n": n}) for n in range(children)],
            finalizer=EnqueueItem("wrap_up", {}),
        )
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, ["default"], children, LEASE)
    await backend.mark_succeeded_many(worker, [Success(r.id, r.attempt, None) for r in claimed])
    return UUID(rows[0].metadata[BATCH_ID_KEY])


async def test_the_maintenance_sweep_ends_a_batch_no_hook_ended() -> None:
    deps = setup()
    batch_id = await batch_ended_by_no_hook(deps)
    before = await deps.backend.get_batch(batch_id)
    assert before is not None and before.status is BatchStatus.ACTIVE
    result = await MaintenanceSweep(deps).run_once()
    assert result.batches_completed == 1
    row = await deps.backend.get_batch(batch_id)
    assert row is not None and row.status is BatchStatus.COMPLETE
    [final] = await deps.backend.list_jobs(JobFilter(actor="wrap_up"))
    assert final.id == row.finalizer_job_id
    assert final.metadata[FINALIZES_KEY] == str(batch_id)
    assert (await MaintenanceSweep(deps).run_once()).batches_completed == 0


async def test_the_maintenance_sweep_ends_every_stale_batch_past_one_call() -> None:
    deps = setup()
    count = STALE_BATCHES_PER_CALL + 20
    async with JobsClient(backend=deps.backend) as client:
        for _ in range(count):  # empty batches: only the sweep ends them
            await client.enqueue_batch([], failure_policy=AbortBatchAfter(1), batch_id=uuid4())
    result = await MaintenanceSweep(deps).run_once()
    assert result.batches_completed == count


async def test_the_prune_deletes_ended_batches_past_the_longest_retention() -> None:
    deps = setup(
        prune_retention_period=timedelta(hours=1), prune_retention_failed=timedelta(hours=3)
    )
    clock = deps.clock
    assert isinstance(clock, FakeClock)
    assert batch_retention(prune_policy(deps.settings)) == timedelta(hours=3)
    old = await batch_ended_by_no_hook(deps)
    await MaintenanceSweep(deps).run_once()
    old_final = await deps.backend.get_batch(old)
    assert old_final is not None and old_final.finalizer_job_id is not None
    worker = uuid4()
    [claimed] = await deps.backend.dispatch_batch(worker, ["default"], 1, LEASE)
    await deps.backend.mark_succeeded_many(worker, [Success(claimed.id, claimed.attempt, None)])
    clock.advance(timedelta(hours=2).total_seconds())
    young = await batch_ended_by_no_hook(deps)
    await MaintenanceSweep(deps).run_once()
    await PruneSweep(deps).run_once()  # 2 h on: the old children go, the old row stays (< 3 h)
    assert await deps.backend.get_batch(old) is not None
    clock.advance(timedelta(hours=2).total_seconds())
    await PruneSweep(deps).run_once()
    assert await deps.backend.get_batch(old) is None
    assert await deps.backend.get_batch(young) is not None  # ended 2 h ago: under 3 h
