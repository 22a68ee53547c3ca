"""Heartbeat: one transaction that keeps the leases a worker names, its rows and their cancel
flags current; a lease it does not name is left to expire."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core.backend.protocol import WorkerInfo
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import LEASE, between, lease, reload, running_job


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
    result = await backend.heartbeat(
        worker, timedelta(seconds=60), [job.lease() for job, _ in mine] + [lease(theirs, worker)]
    )
    after = await harness.now()
    assert result.leases_extended == 2
    assert result.held == result.extended == {job.id for job, _ in mine}
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
    await backend.heartbeat(worker, timedelta(seconds=30), [job.lease()])
    await harness.travel(25)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 0
    await harness.travel(10)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    assert (await reload(backend, job.id)).attempt == 1


async def test_a_heartbeat_without_leases_extends_nothing(harness: Harness) -> None:
    result = await harness.backend.heartbeat(uuid4(), timedelta(seconds=30))
    assert (result.held, result.extended, result.cancel_flags) == (frozenset(), frozenset(), [])


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
    held = [first.lease(), second.lease(), quiet.lease(), lease(elsewhere, worker)]
    result = await backend.heartbeat(worker, timedelta(seconds=30), held)
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


async def test_a_heartbeat_leaves_the_workers_unnamed_rows_to_expire_and_be_reclaimed(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    held, _ = await running_job(backend, worker=worker, lease=timedelta(seconds=30))
    dropped, _ = await running_job(backend, worker=worker, lease=timedelta(seconds=30))
    await harness.travel(25)
    result = await backend.heartbeat(worker, timedelta(seconds=30), [held.lease()])
    assert result.held == result.extended == {held.id}
    untouched = (await reload(backend, dropped.id)).lock_expires_at
    assert untouched is not None and untouched < await harness.now() + timedelta(seconds=10)
    await harness.travel(10)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    assert (await reload(backend, dropped.id)).status is JobStatus.PENDING
    assert (await reload(backend, held.id)).status is JobStatus.RUNNING


async def test_a_heartbeat_refuses_a_reclaimed_lease_by_leaving_it_out_of_held(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    job, _ = await running_job(backend, worker=worker)
    await harness.travel(LEASE.total_seconds() + 1)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)  # same worker
    result = await backend.heartbeat(worker, timedelta(seconds=60), [job.lease()])
    assert result.held == result.extended == frozenset()
    assert await reload(backend, job.id) == again  # the new attempt's lease is untouched
    renewed = await backend.heartbeat(worker, timedelta(seconds=60), [again.lease()])
    assert renewed.held == {job.id}


async def test_a_heartbeat_reads_cancel_flags_only_of_the_leases_it_holds(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    named, _ = await running_job(backend, worker=worker)
    unnamed, _ = await running_job(backend, worker=worker)
    for job in (named, unnamed):
        assert await backend.write_cancel_request(job.id, "stop") == "requested"
    result = await backend.heartbeat(worker, timedelta(seconds=30), [named.lease()])
    assert [flag.job_id for flag in result.cancel_flags] == [named.id]


async def test_a_heartbeat_says_whether_the_worker_row_was_there(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    assert (await backend.heartbeat(worker, timedelta(seconds=30))).registered
    await harness.travel(3 * 24 * 3600)
    assert await backend.delete_stale_workers(timedelta(days=1)) == 1
    gone = await backend.heartbeat(worker, timedelta(seconds=30))
    assert not gone.registered
    assert await backend.list_workers() == []
