"""The leader's lease as the worker keeps it, on the memory backend and a FakeClock: a leader
whose last renewal is older than the lease (minus a heartbeat interval) runs no leader pass,
steps down and campaigns again; another worker takes over once the lease has run out."""

from __future__ import annotations

import asyncio

import structlog

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.clock import FakeClock
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import (
    LeaderElection,
    drop_lapsed_leadership,
    leadership_lapsed,
    run_gated,
)
from tests.worker.sweep_support import MIDNIGHT, memory_deps, until

# fast_settings: heartbeat_interval 0.1 s, lock_lease 2 s: the lease lapses locally 1.9 s
# after the start of the last renewal that succeeded.
LOCAL_LEASE = 1.9


def fleet(count: int) -> list[WorkerDeps]:
    """``count`` workers on one memory backend and one FakeClock."""
    clock = FakeClock(MIDNIGHT)
    backend = InMemoryBackend(clock=clock)
    return [memory_deps(clock, backend) for _ in range(count)]


async def test_a_leader_whose_renewal_is_older_than_its_lease_has_lapsed() -> None:
    [deps] = fleet(1)
    assert await LeaderElection(deps).run_once()
    deps.clock.advance(LOCAL_LEASE - 0.01)  # type: ignore[attr-defined]
    assert not leadership_lapsed(deps)
    drop_lapsed_leadership(deps)  # not lapsed: nothing happens
    assert deps.state.is_leader.is_set()
    deps.clock.advance(0.01)  # type: ignore[attr-defined]
    assert leadership_lapsed(deps)
    with structlog.testing.capture_logs() as logs:
        drop_lapsed_leadership(deps)
        drop_lapsed_leadership(deps)  # once dropped, nothing more to do
    assert not deps.state.is_leader.is_set() and not leadership_lapsed(deps)
    assert [e["event"] for e in logs] == ["leader_lease_lapsed"]
    assert logs[0]["since_renewal"] == LOCAL_LEASE


async def test_a_gated_loop_runs_no_pass_once_the_lease_lapsed() -> None:
    [deps] = fleet(1)
    election = LeaderElection(deps)
    assert await election.run_once()
    passes: list[float] = []

    async def step() -> None:
        passes.append(deps.clock.monotonic())

    task = asyncio.create_task(run_gated(deps, "sweeps", 0.001, step))
    try:
        await until(lambda: len(passes) >= 2)
        deps.clock.advance(10)  # type: ignore[attr-defined]  # frozen past the lease
        await until(lambda: not deps.state.is_leader.is_set())
        lapsed_at = deps.clock.monotonic()
        for _ in range(20):  # the loop waits on the gate now: no pass runs
            await asyncio.sleep(0)
        assert all(at < lapsed_at for at in passes)
        assert await election.run_once()  # nobody else campaigned: elected again
        await until(lambda: passes[-1] >= lapsed_at)
    finally:
        deps.state.shutdown_event.set()
        await asyncio.wait_for(task, 5)


async def test_a_resumed_leader_steps_down_before_campaigning_and_another_worker_leads() -> None:
    old, new = fleet(2)
    assert await LeaderElection(old).run_once()
    old_term = old.state.leader_since
    assert not await LeaderElection(new).run_once()  # the lease is fresh
    old.clock.advance(2.0)  # type: ignore[attr-defined]  # the old leader is frozen
    assert await LeaderElection(new).run_once()  # a whole lease without a renewal
    with structlog.testing.capture_logs() as logs:
        assert not await LeaderElection(old).run_once()
    assert [e["event"] for e in logs] == ["leader_lease_lapsed"]
    assert not old.state.is_leader.is_set() and new.state.is_leader.is_set()
    assert old.state.leader_since == old_term  # it never started another term
    leader = await old.backend.get_leader()
    assert leader is not None and leader.worker_id == new.worker_id
