"""The leader's instruments, each recorded by the pass that does the work: run_once on the
memory backend and a FakeClock (reclaims, deadlines, promotions, batches, prune, archive
expiry, stale workers, the queue depth sample), and the leader loops' own (pass durations,
unexpected errors, elections)."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, Success, WorkerInfo
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.clock import FakeClock
from taskq_core.obs.gauges import watch_worker
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import LeaderElection, run_gated
from taskq_core.worker.leader_sample import LeaderSampler
from taskq_core.worker.sweeps.archive_expiry import ArchiveExpirySweep
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from taskq_core.worker.sweeps.promotion import ScheduledPromotion
from taskq_core.worker.sweeps.prune import PruneSweep
from taskq_core.worker.sweeps.stale_workers import StaleWorkerCleanup, stale_worker_threshold
from taskq_core.worker.transient import UnexpectedErrorGuard
from tests.conformance.states import LEASE, running_job
from tests.obs.otel_sdk import Sdk
from tests.worker.sweep_support import MIDNIGHT, TERMINAL, lead, memory_deps, terminal_job

HOUR = timedelta(hours=1)


def setup(**settings: object) -> tuple[WorkerDeps, InMemoryBackend, FakeClock]:
    clock = FakeClock(MIDNIGHT)
    deps = memory_deps(clock, **settings)
    assert isinstance(deps.backend, InMemoryBackend)
    return deps, deps.backend, clock


async def test_the_maintenance_sweep_counts_reclaims_deadlines_and_promotions(sdk: Sdk) -> None:
    deps, backend, clock = setup()
    await running_job(backend, lease=timedelta(seconds=5))  # its worker died: lease runs out
    late = EnqueueArgs("work", {}, schedule_to_close=timedelta(seconds=30))
    await backend.enqueue(late)
    await backend.enqueue(EnqueueArgs("work", {}, delay=timedelta(seconds=30)))
    clock.advance(timedelta(minutes=1))
    result = await MaintenanceSweep(deps).run_once()
    assert (result.reclaimed, result.deadline_failed) == (1, 1)
    assert await ScheduledPromotion(deps).run_once() == 1
    assert sdk.value("taskq.reclaim.jobs") == 1
    assert sdk.value("taskq.deadline_exceeded_sweep.jobs_failed") == 1
    assert sdk.value("taskq.scheduled.promoted") == 1


async def test_a_batch_the_sweep_ends_is_counted_as_ended_by_the_sweep(sdk: Sdk) -> None:
    deps, backend, _ = setup()
    async with JobsClient(backend=backend) as client:
        await client.enqueue_batch([("work", {})], finalizer=EnqueueItem("wrap_up", {}))
    worker = uuid4()
    [claimed] = await backend.dispatch_batch(worker, ["default"], 1, LEASE)
    await backend.mark_succeeded_many(worker, [Success(claimed.id, claimed.attempt, None)])
    assert (await MaintenanceSweep(deps).run_once()).batches_completed == 1  # no hook ran
    assert sdk.value("taskq.batches.ended", taskq__batch__status="complete",
                     taskq__batch__ended_by="sweep") == 1  # fmt: skip
    assert sdk.value("taskq.batches.ended", taskq__batch__ended_by="hook") == 0


async def test_prune_and_archive_expiry_count_what_they_moved_and_deleted(sdk: Sdk) -> None:
    deps, backend, clock = setup(
        prune_retention_period="1h",
        **{f"prune_retention_{s}": "1h" for s in ("succeeded", "failed", "cancelled", "abandoned")},
        archive_retention_period="1h",
    )
    jobs = {status: await terminal_job(backend, clock, status) for status in TERMINAL}
    clock.advance(HOUR + timedelta(seconds=1))
    result = await PruneSweep(deps).run_once()
    assert result is not None and result.total == len(TERMINAL)
    for status, job in jobs.items():
        counted = sdk.value("taskq.prune.jobs_archived", taskq__job__status=status.value,
                            messaging__destination__name=job.queue)  # fmt: skip
        assert counted == 1, status
    clock.advance(timedelta(days=400))  # past any archive retention
    deleted = await ArchiveExpirySweep(deps).run_once()
    assert deleted == len(TERMINAL)
    assert sdk.value("taskq.archive_expiry.jobs_deleted") == len(TERMINAL)


async def test_stale_worker_rows_deleted_are_counted(sdk: Sdk) -> None:
    deps, backend, clock = setup()
    info = WorkerInfo(uuid4(), "host", 1, ["default"], [], 1)
    await backend.register_worker(info)
    clock.advance(stale_worker_threshold(deps.settings) + timedelta(seconds=1))
    assert await StaleWorkerCleanup(deps).run_once() == 1
    assert sdk.value("taskq.workers.stale_deleted") == 1


async def test_the_leader_sample_reports_depths_only_while_leading(sdk: Sdk) -> None:
    deps, backend, _ = setup()
    for _ in range(3):
        await backend.enqueue(EnqueueArgs("work", {}, queue="media"))
    await backend.enqueue(EnqueueArgs("work", {}, queue="media", delay=HOUR))
    await running_job(backend, queue="mail")
    sample = await LeaderSampler(deps).run_once()
    assert sample is not None
    with watch_worker(deps):
        assert sdk.points("taskq.queue.depth") == []  # a follower reports no fleet figures
        deps.state.is_leader.set()
        depth = {(p.attributes["messaging.destination.name"], p.attributes["taskq.job.status"]):
                 p.value for p in sdk.points("taskq.queue.depth")}  # fmt: skip
    assert depth[("media", "pending")] == 3
    assert depth[("media", "scheduled")] == 1
    assert (depth[("mail", "running")], depth[("mail", "pending")]) == (1, 0)


async def test_leader_loops_time_their_passes_and_count_unexpected_errors(sdk: Sdk) -> None:
    deps, _, _ = setup()
    lead(deps)
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("a bug in a sweep")
        deps.state.shutdown_event.set()

    await run_gated(deps, "sweeps", 0.0, flaky)
    assert sdk.value("taskq.maintenance.duration", loop="sweeps") == 2
    assert sdk.value("taskq.worker.leader_loop_unexpected_errors_total", loop="sweeps") == 1
    guard = UnexpectedErrorGuard("producer", deps.log, meters=deps.meters)
    guard.failed(ValueError("a bug in the producer"))
    assert sdk.value("taskq.worker.loop_unexpected_errors_total", loop="producer") == 1
    assert sdk.value("taskq.worker.leader_loop_unexpected_errors_total", loop="producer") == 0


async def test_elections_and_losses_are_counted(sdk: Sdk) -> None:
    deps, backend, _ = setup()
    election = LeaderElection(deps)
    assert await election.run_once()
    assert await election.run_once()  # still leading: not a new election
    await backend.release_leadership(deps.worker_id)
    assert await backend.try_acquire_leadership(uuid4())  # another worker takes over
    assert not await election.run_once()
    assert sdk.value("taskq.maintenance_leader.elected") == 1
    assert sdk.value("taskq.maintenance_leader.lost") == 1
    assert not deps.state.is_leader.is_set()
