"""Kill -9 storm: three workers, one of them SIGKILLed (and restarted) every 2 s during a drain."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from uuid import UUID

from chaos import actors
from chaos.harness import Harness
from chaos.procs import Proc
from taskq_core.actors import ActorRef

SUMMARY = "3 workers; SIGKILL a random one every 2 s (and start a new one) during a drain"
SUMMARY_TX = SUMMARY + ", transactional actor (effects written through ctx.connection())"


@dataclass(frozen=True, slots=True)
class Size:
    jobs: int
    workers: int
    concurrency: int
    seconds: float  # how long the storm lasts (it stops early once everything is terminal)
    every: float  # one kill per this many seconds
    recovery: float  # how long the drain may take after the last kill


FULL = Size(jobs=3000, workers=3, concurrency=8, seconds=60, every=2, recovery=120)
SHORT = Size(jobs=300, workers=3, concurrency=4, seconds=12, every=2, recovery=45)


async def run_plain(h: Harness, short: bool) -> None:
    await _storm(h, SHORT if short else FULL, actors.work)


async def run_transactional(h: Harness, short: bool) -> None:
    await _storm(h, SHORT if short else FULL, actors.transactional)


async def _storm(h: Harness, size: Size, actor: ActorRef) -> None:
    serial = 0

    def spawn() -> Proc:
        nonlocal serial
        serial += 1
        return h.fleet.worker(f"storm-{serial}", concurrency=size.concurrency)

    workers = [spawn() for _ in range(size.workers)]
    if not h.check("workers registered", await h.registered(workers)):
        return
    await h.enqueue([(actor, {"ms": ms}) for ms in h.durations(size.jobs, 50, 700)])
    await h.started_bodies(1, timeout=15)
    killed: set[Proc] = set()
    interrupted: list[tuple[float, set[UUID]]] = []  # per kill: when, and the bodies it cut
    last_kill: float | None = None
    end = time.monotonic() + size.seconds
    while time.monotonic() < end:
        await asyncio.sleep(size.every)  # the storm's cadence, not a synchronization
        if await h.probe.unfinished() == 0:
            break
        index = h.random.randrange(len(workers))
        victim = workers[index]
        victim.signal(signal.SIGKILL)
        killed.add(victim)
        last_kill = time.time()
        await victim.wait(5)
        interrupted.append((last_kill, h.markers().in_flight(victim.pid)))
        workers[index] = spawn()
    h.note(f"{len(killed)} SIGKILLs over {size.seconds:g}s")
    # The last replacement may still be importing: its SIGTERM at the end must find it running.
    await h.registered([w for w in workers if w.alive()])
    died = [p for p in h.fleet.procs if p not in killed and not p.alive()]
    h.check(
        "no worker exits unless killed",
        not died,
        "; ".join(p.describe_exit() for p in died),
    )
    await h.finish(
        fault_at=last_kill, recovery=size.recovery, transactional=actor is actors.transactional
    )
    await h.note_reclaims(interrupted, "interrupted bodies")
