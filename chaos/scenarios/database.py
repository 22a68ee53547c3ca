"""PostgreSQL goes away: two fast restarts and one outage during a drain by standalone workers.

The workers are plain `taskq worker` processes with nobody to restart them: they must live
through every fault and drain the queue afterwards on their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from chaos import actors
from chaos.harness import Harness
from chaos.procs import Proc

SUMMARY = "2 standalone workers; 2 fast PostgreSQL restarts, then an outage, during a drain"


@dataclass(frozen=True, slots=True)
class Size:
    jobs: int
    concurrency: int
    outage: float
    between: float  # how long jobs must flow again after a restart before the next fault
    recovery: float


FULL = Size(jobs=3000, concurrency=8, outage=20, between=3, recovery=90)
SHORT = Size(jobs=600, concurrency=8, outage=5, between=1.5, recovery=40)


async def run(h: Harness, short: bool) -> None:
    size = SHORT if short else FULL
    workers = [h.fleet.worker(f"pg-{i}", concurrency=size.concurrency) for i in (1, 2)]
    if not h.check("workers registered", await h.registered(workers)):
        return
    await h.enqueue([(actors.work, {"ms": ms}) for ms in h.durations(size.jobs, 50, 700)])
    await h.started_bodies(size.concurrency, timeout=15)
    phases: list[tuple[str, float]] = []
    exits: dict[Proc, str] = {}

    def watch(phase: str) -> None:
        for proc in workers:
            if proc not in exits and not proc.alive():
                exits[proc] = phase

    for n in (1, 2):
        phase = f"fast restart {n}"
        await asyncio.to_thread(h.server.restart, "fast")
        at = time.time()
        phases.append((phase, at))
        await _jobs_flow_again(h, phase, at, size, watch)
    phase = f"{size.outage:g}s outage"
    await asyncio.to_thread(h.server.stop, "fast")
    down_at = time.monotonic()
    while time.monotonic() - down_at < size.outage:
        watch(phase)
        await asyncio.sleep(0.1)  # the outage lasts this long: the fault, not a synchronization
    await asyncio.to_thread(h.server.start)
    back_at = time.time()
    phases.append((phase, back_at))
    await _jobs_flow_again(h, "after the outage", back_at, size, watch)
    watch("after the outage")
    h.check(
        "standalone workers survive restarts and the outage",
        not exits,
        "; ".join(f"{p.describe_exit()} [during {phase}]" for p, phase in exits.items()),
    )
    await h.finish(fault_at=back_at, recovery=size.recovery)


async def _jobs_flow_again(
    h: Harness, phase: str, since: float, size: Size, watch: Callable[[str], None]
) -> None:
    """Wait until a job succeeds after ``since``, then ``between`` more seconds of draining."""

    async def success() -> float | None:
        watch(phase)
        times = await h.probe.finish_times("succeeded")
        after = [t for t in times or () if t >= since]
        return after[0] if after else None

    first = await h.wait_for(success, 30, give_up=lambda: not h.fleet.alive())
    if first is None:
        h.note(f"{phase}: no job succeeded afterwards")
        return
    h.note(f"{phase}: first success after {first - since:.1f}s")
    end = time.monotonic() + size.between
    while time.monotonic() < end:
        watch(phase)
        await asyncio.sleep(0.1)  # let the drain run between two faults
