"""Worker registrations and maintenance leadership."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import Backend, Start, WorkerInfo
from taskq_core.constants import leader_lock_key
from tests.conformance.conftest import Harness
from tests.conformance.states import between, running_job


def info(worker_id: UUID, **fields: object) -> WorkerInfo:
    base: dict[str, object] = {
        "hostname": "box-1",
        "pid": 4242,
        "queues": ["default", "media"],
        "actors": ["resize"],
        "concurrency": 8,
        "label": "blue",
        "workgroup_instance": "wg-1",
        "version": "0.1.0",
    }
    base.update(fields)
    return WorkerInfo(id=worker_id, **base)  # type: ignore[arg-type]


async def test_a_registered_worker_is_listed_running(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    before = await harness.now()
    await backend.register_worker(info(worker))
    after = await harness.now()
    [row] = await backend.list_workers()
    assert (row.id, row.hostname, row.pid, row.label, row.workgroup_instance) == (
        worker,
        "box-1",
        4242,
        "blue",
        "wg-1",
    )
    assert (row.queues, row.actors, row.concurrency, row.version) == (
        ["default", "media"],
        ["resize"],
        8,
        "0.1.0",
    )
    assert (row.status, row.stopped_at, row.is_leader, row.running_jobs) == (
        "running",
        None,
        False,
        0,
    )
    assert between(row.started_at, before, after) and between(row.last_seen_at, before, after)


async def test_a_stopped_worker_keeps_its_row(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await backend.mark_worker_stopped(worker)
    [row] = await backend.list_workers()
    assert row.status == "stopped" and row.stopped_at is not None
    await backend.mark_worker_stopped(uuid4())  # unknown: nothing happens


async def test_registering_again_refreshes_the_row_and_keeps_its_start(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    [first] = await backend.list_workers()
    await backend.mark_worker_stopped(worker)
    await harness.travel(10)
    await backend.register_worker(info(worker, pid=99, queues=["other"]))
    [again] = await backend.list_workers()
    assert (again.pid, again.queues, again.status, again.stopped_at) == (
        99,
        ["other"],
        "running",
        None,
    )
    assert again.last_seen_at - again.started_at >= timedelta(seconds=10)
    assert first.started_at <= again.started_at + timedelta(seconds=10)


async def test_workers_are_listed_most_recently_seen_first(harness: Harness) -> None:
    backend = harness.backend
    old, new = uuid4(), uuid4()
    await backend.register_worker(info(old))
    await harness.travel(5)
    await backend.register_worker(info(new))
    assert [row.id for row in await backend.list_workers()] == [new, old]
    await harness.travel(5)
    await backend.heartbeat(old, timedelta(seconds=30))
    assert [row.id for row in await backend.list_workers()] == [old, new]


async def test_a_worker_row_counts_its_running_jobs(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await running_job(backend, worker=worker)
    await running_job(backend, worker=worker)
    [row] = await backend.list_workers()
    assert (row.running_jobs, row.claimed_jobs) == (2, 0)


async def test_a_worker_row_counts_claimed_jobs_apart_from_running_ones(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await running_job(backend, worker=worker)
    claimed = [(await running_job(backend, worker=worker, started=False))[0] for _ in range(3)]
    [row] = await backend.list_workers()
    assert (row.running_jobs, row.claimed_jobs) == (1, 3)
    await backend.mark_started_many(worker, [Start(claimed[0].id, claimed[0].attempt)])
    [row] = await backend.list_workers()
    assert (row.running_jobs, row.claimed_jobs) == (2, 2)


async def test_the_first_worker_to_ask_leads_until_it_releases(harness: Harness) -> None:
    backend = harness.backend
    first, second = uuid4(), uuid4()
    for worker in (first, second):
        await backend.register_worker(info(worker))
    assert await backend.get_leader() is None
    before = await harness.now()
    assert await backend.try_acquire_leadership(first)
    after = await harness.now()
    assert await backend.try_acquire_leadership(first)  # still leading
    assert not await backend.try_acquire_leadership(second)
    leader = await backend.get_leader()
    assert leader is not None and leader.worker_id == first
    assert between(leader.elected_at, before, after)
    assert {row.id: row.is_leader for row in await backend.list_workers()} == {
        first: True,
        second: False,
    }
    await backend.release_leadership(second)  # not leading: nothing happens
    assert (await backend.get_leader()) is not None
    await backend.release_leadership(first)
    assert await backend.get_leader() is None
    assert await backend.try_acquire_leadership(second)
    leader = await backend.get_leader()
    assert leader is not None and leader.worker_id == second
    await backend.release_leadership(second)


async def test_renewing_leadership_keeps_the_election_time(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    assert await backend.try_acquire_leadership(worker)
    elected = await backend.get_leader()
    await harness.travel(5)
    assert await backend.try_acquire_leadership(worker)
    renewed = await backend.get_leader()
    assert elected is not None and renewed is not None
    assert renewed.last_seen_at > renewed.elected_at
    await backend.release_leadership(worker)


@pytest.mark.postgres_only("advisory locks are shared between backend instances")
async def test_only_one_backend_instance_leads_at_a_time(harness: Harness) -> None:
    assert harness.pg is not None
    other = await PostgresBackend.connect(harness.pg.dsn, harness.pg.schema)
    try:
        first, second = uuid4(), uuid4()
        assert await harness.backend.try_acquire_leadership(first)
        assert not await other.try_acquire_leadership(second)
        await harness.backend.release_leadership(first)
        assert await other.try_acquire_leadership(second)
        assert not await harness.backend.try_acquire_leadership(first)
        leader = await harness.backend.get_leader()
        assert leader is not None and leader.worker_id == second
    finally:
        await other.close()
    # Closing the leading backend frees the lock for everyone else.
    assert await harness.backend.try_acquire_leadership(uuid4())


@pytest.mark.postgres_only("losing the leader's connection is a Postgres failure mode")
async def test_a_dead_leader_connection_loses_leadership_and_reconnects(harness: Harness) -> None:
    assert harness.pg is not None
    backend = harness.backend
    worker = uuid4()
    assert await backend.try_acquire_leadership(worker)
    terminated = await harness.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
        "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)",
        leader_lock_key(harness.pg.schema),
    )
    assert len(terminated) == 1
    other = await PostgresBackend.connect(harness.pg.dsn, harness.pg.schema)
    try:
        contender = uuid4()
        for _ in range(50):  # the server drops the session asynchronously
            if await other.try_acquire_leadership(contender):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the terminated session still holds the leader lock")
        assert not await backend.try_acquire_leadership(worker)
        await other.release_leadership(contender)
    finally:
        await other.close()
    assert await backend.try_acquire_leadership(worker)  # reconnects and wins


# The leader's lease in the lease tests. On Postgres the server's idle_session_timeout
# enforces it in real time, so these tests take a few real seconds there.
LEASE = timedelta(seconds=2)


@asynccontextmanager
async def other_worker(harness: Harness) -> AsyncIterator[Backend]:
    """Another worker's backend: Postgres, an instance of its own (each holds its own lock
    connection); memory, the same store."""
    if harness.pg is None:
        yield harness.backend
        return
    other = await PostgresBackend.connect(harness.pg.dsn, harness.pg.schema)
    try:
        yield other
    finally:
        await other.close()


async def let_pass(harness: Harness, seconds: float) -> None:
    """Let ``seconds`` go by for the leader's lease: the memory clock moves; on Postgres real
    time must pass, because the server ends a silent leader's session on its own clock."""
    if harness.clock is not None:
        harness.clock.advance(seconds)
    else:
        await asyncio.sleep(seconds)  # the passing time is the condition under test


async def test_a_leader_that_renews_within_its_lease_keeps_it(harness: Harness) -> None:
    backend = harness.backend
    leader, contender = uuid4(), uuid4()
    async with other_worker(harness) as other:
        assert await backend.try_acquire_leadership(leader, lease=LEASE)
        for _ in range(6):  # one and a half leases, renewed every quarter of one
            await let_pass(harness, LEASE.total_seconds() / 4)
            assert await backend.try_acquire_leadership(leader, lease=LEASE)
            assert not await other.try_acquire_leadership(contender, lease=LEASE)
        row = await backend.get_leader()
        assert row is not None and row.worker_id == leader
        await backend.release_leadership(leader)


async def test_a_silent_leader_loses_its_lease_to_the_next_worker_that_asks(
    harness: Harness,
) -> None:
    backend = harness.backend
    frozen, successor = uuid4(), uuid4()
    async with other_worker(harness) as other:
        assert await backend.try_acquire_leadership(frozen, lease=LEASE)
        assert not await other.try_acquire_leadership(successor, lease=LEASE)
        # The leader renews nothing from now on (a frozen process); the other worker keeps
        # campaigning, as every follower does each heartbeat interval.
        waited = 0.0
        step = LEASE.total_seconds() / 8
        while not await other.try_acquire_leadership(successor, lease=LEASE):
            assert waited < 10 * LEASE.total_seconds(), "the silent leader kept its lease"
            await let_pass(harness, step)
            waited += step
        if harness.clock is not None:  # time is exact only on the injected clock
            assert waited >= LEASE.total_seconds()
        row = await backend.get_leader()
        assert row is not None and row.worker_id == successor
        # Resumed, the old leader finds another leading: False, not an error, and it does
        # not take the leadership back.
        assert not await backend.try_acquire_leadership(frozen, lease=LEASE)
        assert await other.try_acquire_leadership(successor, lease=LEASE)
        await other.release_leadership(successor)


async def test_a_lapsed_lease_nobody_took_is_renewed_by_its_leader(harness: Harness) -> None:
    backend = harness.backend
    leader = uuid4()
    assert await backend.try_acquire_leadership(leader, lease=LEASE)
    elected = await backend.get_leader()
    await let_pass(harness, 1.5 * LEASE.total_seconds())
    assert await backend.try_acquire_leadership(leader, lease=LEASE)
    row = await backend.get_leader()
    assert row is not None and elected is not None
    assert (row.worker_id, row.elected_at) == (leader, elected.elected_at)
    await backend.release_leadership(leader)


@pytest.mark.postgres_only("the lease is the server's idle_session_timeout on the lock's session")
async def test_the_server_ends_a_silent_leaders_session_and_frees_the_lock(
    harness: Harness,
) -> None:
    assert harness.pg is not None
    backend = harness.backend
    assert await backend.try_acquire_leadership(uuid4(), lease=LEASE)
    holders = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
        "AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)"
    )
    key = leader_lock_key(harness.pg.schema)
    assert (await harness.sql(holders, key))[0][0] == 1
    for _ in range(100):  # the lease, then the server's end of the session
        if (await harness.sql(holders, key))[0][0] == 0:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the silent leader's session still holds the lock")


@pytest.mark.postgres_only("the server ends any lock connection idle for a lease")
async def test_a_follower_whose_idle_connection_the_server_ended_campaigns_without_error(
    harness: Harness,
) -> None:
    assert harness.pg is not None
    leader, follower = uuid4(), uuid4()
    sessions = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
        "AND datname = current_database()"
    )
    name = f"taskq_leader_{harness.pg.schema}"
    async with other_worker(harness) as other:
        assert await harness.backend.try_acquire_leadership(leader)  # no lease: it stays
        assert not await other.try_acquire_leadership(follower, lease=timedelta(seconds=1))
        assert (await harness.sql(sessions, name))[0][0] == 2
        for _ in range(100):  # the follower's connection, idle for a lease, is ended
            if (await harness.sql(sessions, name))[0][0] == 1:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the server did not end the idle follower's connection")
        # Not an outage: the campaign answers (on a new connection), it does not raise.
        assert not await other.try_acquire_leadership(follower, lease=timedelta(seconds=1))
        await harness.backend.release_leadership(leader)
        assert await other.try_acquire_leadership(follower, lease=timedelta(seconds=1))
        await other.release_leadership(follower)
