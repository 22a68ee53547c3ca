"""Kill -9 of the maintenance leader: another worker must take over and reclaim its jobs."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from uuid import UUID

from chaos import actors
from chaos.harness import Harness
from chaos.procs import HEARTBEAT_INTERVAL, pid_alive

SUMMARY = "3 workers; SIGKILL the maintenance leader mid-drain, measure the failover gap"
# The same bound as tests/e2e/test_resilience.py: one election round plus a second.
FAILOVER_SLA = HEARTBEAT_INTERVAL + 1.0


@dataclass(frozen=True, slots=True)
class Size:
    jobs: int
    workers: int
    concurrency: int
    recovery: float


FULL = Size(jobs=1000, workers=3, concurrency=4, recovery=60)
SHORT = Size(jobs=200, workers=3, concurrency=4, recovery=40)


async def run(h: Harness, short: bool) -> None:
    size = SHORT if short else FULL
    workers = [h.fleet.worker(f"lead-{i}", concurrency=size.concurrency) for i in (1, 2, 3)]
    if not h.check("workers registered", await h.registered(workers)):
        return
    ours = {p.pid: p for p in workers}

    async def elected() -> UUID | None:
        leader = await h.probe.leader()
        pids = await h.worker_pids()
        return leader if leader is not None and pids.get(leader) in ours else None

    old = await h.wait_for(elected, 20)
    if not h.check("a leader is elected", old is not None):
        return
    assert old is not None
    await h.enqueue([(actors.work, {"ms": ms}) for ms in h.durations(size.jobs, 200, 700)])
    await h.started_bodies(size.concurrency * size.workers, timeout=20)
    victim = ours[(await h.worker_pids())[old]]
    held = [job for job, owner in await h.probe.running_owners() or () if owner == old]
    cut = h.markers().in_flight(victim.pid)
    victim.signal(signal.SIGKILL)
    killed_at, t0 = time.time(), time.monotonic()

    async def replaced() -> UUID | None:
        leader = await h.probe.leader()
        if leader is None or leader == old:
            return None
        pid = (await h.worker_pids()).get(leader)
        return leader if pid is not None and pid_alive(pid) else None

    new = await h.wait_for(replaced, 30, step=0.02)
    gap = time.monotonic() - t0
    h.check("another worker takes the leadership", new is not None, "no new leader within 30s")
    if new is not None:
        h.note(f"leader failover gap {gap:.2f}s ({len(held)} jobs held by the old leader)")
        h.check(
            f"failover within heartbeat_interval + 1s ({FAILOVER_SLA:g}s)",
            gap <= FAILOVER_SLA,
            f"gap {gap:.2f}s",
            timed=True,
        )
    await h.finish(fault_at=killed_at, recovery=size.recovery)
    await h.note_reclaims([(killed_at, cut)], "bodies of the old leader")
    statuses = await h.probe.statuses(held) or {}
    h.check(
        "the old leader's jobs are reclaimed and finish",
        all(s == "succeeded" for s in statuses.values()) and len(statuses) == len(held),
        ", ".join(sorted(set(statuses.values()))),
    )
