"""Heartbeat: one transaction that keeps a worker's leases, rows and cancel flags current."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core.backend.protocol import WorkerInfo
from tests.conformance.conftest import Harness
from tests.conformance.states import between, reload, running_job


def info(worker_id: UUID) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        hostname="host",
        pid=1234,
        queues=["default"],
        actors=["work"],
        concurrency=4,
    )


async def test_a_heartbeat_extends_only_this_workers_leases(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    mine = [await running_job(backend, worker=worker) for _ in range(2)]
    theirs, _ = await running_job(backend)
    await harness.travel(20)
    before = await harness.now()
    result = await backend.heartbeat(worker, timedelta(seconds=60))
    after = await harness.now()
    assert result.leases_extended == 2
    assert result.cancel_flags == []
    for job, _ in mine:
        row = await reload(backend, job.id)
        assert between(
            row.lock_expires_at, before + timedelta(seconds=60), after + timedelta(seconds=60)
        )
    untouched = await reload(backend, theirs.id)
    assert untouched.lock_expires_at is not None
    assert untouched.lock_expires_at < before + timedelta(seconds=15)  # still the old lease


async def test_an_extended_lease_is_not_reclaimed(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, lease=timedelta(seconds=30))
    await harness.travel(25)
    await backend.heartbeat(worker, timedelta(seconds=30))
    await harness.travel(25)
    assert await backend.reclaim_expired_locks(timedelta(0), timedelta(0)) == 0
    await harness.travel(10)
    assert await backend.reclaim_expired_locks(timedelta(0), timedelta(0)) == 1
    assert (await reload(backend, job.id)).attempt == 1


async def test_a_heartbeat_without_running_jobs_extends_nothing(harness: Harness) -> None:
    result = await harness.backend.heartbeat(uuid4(), timedelta(seconds=30))
    assert (result.leases_extended, result.cancel_flags) == (0, [])


async def test_a_heartbeat_reports_the_cancel_flags_of_this_worker(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    first, _ = await running_job(backend, worker=worker)
    second, _ = await running_job(backend, worker=worker)
    quiet, _ = await running_job(backend, worker=worker)
    elsewhere, _ = await running_job(backend)
    for job in (second, first, elsewhere):
        assert await backend.write_cancel_request(job.id, f"stop {job.payload}") == "requested"
        await harness.travel(1)
    result = await backend.heartbeat(worker, timedelta(seconds=30))
    assert result.leases_extended == 3
    assert [flag.job_id for flag in result.cancel_flags] == [second.id, first.id]
    assert {flag.cancel_phase for flag in result.cancel_flags} == {1}
    assert all(flag.reason is not None for flag in result.cancel_flags)
    assert result.cancel_flags == await backend.poll_cancel_flags(worker)
    assert quiet.id not in {flag.job_id for flag in result.cancel_flags}


async def test_a_heartbeat_touches_the_worker_row(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(30)
    before = await harness.now()
    await backend.heartbeat(worker, timedelta(seconds=30))
    after = await harness.now()
    [row] = await backend.list_workers()
    assert between(row.last_seen_at, before, after)


async def test_a_leaders_heartbeat_refreshes_the_leader_row(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    assert await backend.try_acquire_leadership(worker)
    await harness.travel(30)
    await backend.heartbeat(worker, timedelta(seconds=30), is_leader=False)
    stale = await backend.get_leader()
    assert stale is not None
    before = await harness.now()
    await backend.heartbeat(worker, timedelta(seconds=30), is_leader=True)
    after = await harness.now()
    fresh = await backend.get_leader()
    assert fresh is not None and fresh.worker_id == worker
    assert stale.last_seen_at < before
    assert between(fresh.last_seen_at, before, after)
    await backend.release_leadership(worker)
