"""SIGTERM of a worker with cooperative and non-cooperative jobs in flight.

Cooperative bodies watch ``ctx.cancel_event``: they stop, their jobs go back to the queue and
later succeed on another worker. Non-cooperative ones (an async body that swallows its
cancellation, a plain ``def`` in a thread) cannot be stopped: they must end ``abandoned``, and
the worker must still exit 0 within its termination grace, leaving no job ``running``.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any

from chaos import actors
from chaos.harness import Harness
from chaos.procs import TERMINATION_GRACE

SUMMARY = "SIGTERM a worker running cooperative and non-cooperative (async, thread) jobs"


@dataclass(frozen=True, slots=True)
class Size:
    cooperative: int
    stubborn: int  # of each non-cooperative kind
    cooperative_seconds: float
    stubborn_seconds: float  # longer than the termination grace: only abandoning ends them
    recovery: float


FULL = Size(cooperative=4, stubborn=2, cooperative_seconds=8, stubborn_seconds=40, recovery=60)
SHORT = Size(cooperative=3, stubborn=2, cooperative_seconds=4, stubborn_seconds=30, recovery=45)
AWAY = ("pending", "scheduled")


async def run(h: Harness, short: bool) -> None:
    size = SHORT if short else FULL
    total = size.cooperative + 2 * size.stubborn
    victim = h.fleet.worker("victim", concurrency=total + 1)
    if not h.check("worker registered", await h.registered([victim])):
        return
    coop = await h.enqueue(
        [(actors.cooperative, {"seconds": size.cooperative_seconds})] * size.cooperative
    )
    stubborn = await h.enqueue(
        [(actors.stubborn, {"seconds": size.stubborn_seconds})] * size.stubborn
        + [(actors.stubborn_thread, {"seconds": size.stubborn_seconds})] * size.stubborn
    )
    if not h.check("every body started", await h.started_bodies(total, timeout=20)):
        return
    victim.signal(signal.SIGTERM)
    sent = time.time()
    code = await victim.wait(TERMINATION_GRACE + 5)
    took = time.time() - sent
    h.note(f"worker exit {code} {took:.1f}s after SIGTERM")
    h.check(
        "the worker exits 0 after SIGTERM",
        code == 0,
        victim.describe_exit() + (f" {took:.0f}s after SIGTERM" if code is None else ""),
    )
    h.check(
        f"... within its termination grace ({TERMINATION_GRACE:g}s)",
        code is not None and took <= TERMINATION_GRACE,
        f"took {took:.1f}s",
        timed=True,
    )
    if code is None:
        victim.signal(signal.SIGKILL)
        await victim.wait(5)
    statuses: dict[Any, str] = await h.probe.statuses([*coop, *stubborn]) or {}
    running = [job for job, s in statuses.items() if s == "running"]
    h.check("no job left running by the stopped worker", not running, f"{len(running)} running")
    back = [job for job in coop if statuses.get(job) in AWAY]
    h.check(
        "cooperative jobs go back to the queue",
        len(back) == len(coop),
        _tally(statuses, coop),
    )
    abandoned = [job for job in stubborn if statuses.get(job) == "abandoned"]
    h.check(
        "non-cooperative jobs end abandoned",
        len(abandoned) == len(stubborn),
        _tally(statuses, stubborn),
    )
    rescuer = h.fleet.worker("rescuer", concurrency=total + 1)
    await h.registered([rescuer])

    async def coop_settled() -> dict[Any, str] | None:
        now = await h.probe.statuses(coop)
        return now if now and all(s not in (*AWAY, "running") for s in now.values()) else None

    settled = await h.wait_for(coop_settled, size.recovery, step=0.2) or {}
    markers = h.markers()
    elsewhere = [
        job
        for job in coop
        if settled.get(job) == "succeeded" and markers.finished_by(job) == {rescuer.pid}
    ]
    h.check(
        "cooperative jobs later succeed on another worker",
        len(elsewhere) == len(coop),
        f"{len(elsewhere)}/{len(coop)} succeeded on the rescuer; {_tally(settled, coop)}",
    )
    await h.finish(fault_at=sent, recovery=size.recovery)


def _tally(statuses: dict[Any, str], jobs: list[Any]) -> str:
    counts: dict[str, int] = {}
    for job in jobs:
        status = statuses.get(job, "missing")
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
