"""SIGTERM of a worker with cooperative and non-cooperative jobs in flight: a deploy.

Cooperative bodies watch ``ctx.cancel_event``: they stop, their attempts end ``interrupted``
(no retry budget used). Non-cooperative ones (an async body that swallows its cancellation, a
plain ``def`` in a thread) cannot be stopped: their attempts end ``abandoned`` and the worker
still exits 0 within its termination grace, leaving no job ``running``. A graceful shutdown
never ends a job for good: every one of them goes back to the queue and later succeeds on
another worker, each body under its own attempt number.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

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


# A stubborn job's next body (on the rescuer) takes RETRY_SECONDS, not its first's seconds.
RETRY_SECONDS = 0.5
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
    payload = {"seconds": size.stubborn_seconds, "retry_seconds": RETRY_SECONDS}
    stubborn = await h.enqueue(
        [(actors.stubborn, payload)] * size.stubborn
        + [(actors.stubborn_thread, payload)] * size.stubborn
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
    everyone = [*coop, *stubborn]
    back = [job for job in everyone if statuses.get(job) in AWAY]
    h.check(
        "every job goes back to the queue (none ends for good)",
        len(back) == len(everyone),
        f"cooperative {_tally(statuses, coop)}; non-cooperative {_tally(statuses, stubborn)}",
    )
    outcomes = await _outcomes(h, everyone)  # only the stopped worker ran them so far
    h.check(
        "cooperative attempts end interrupted",
        all(outcomes.get(job) == "interrupted" for job in coop),
        _tally(outcomes, coop),
    )
    h.check(
        "non-cooperative attempts end abandoned",
        all(outcomes.get(job) == "abandoned" for job in stubborn),
        _tally(outcomes, stubborn),
    )
    rescuer = h.fleet.worker("rescuer", concurrency=total + 1)
    await h.registered([rescuer])

    async def settled() -> dict[Any, str] | None:
        now = await h.probe.statuses(everyone)
        return now if now and all(s not in (*AWAY, "running") for s in now.values()) else None

    final = await h.wait_for(settled, size.recovery, step=0.2) or {}
    markers = h.markers()
    elsewhere = [
        job
        for job in everyone
        if final.get(job) == "succeeded" and markers.finished_by(job) == {rescuer.pid}
    ]
    h.check(
        "every job later succeeds on another worker",
        len(elsewhere) == len(everyone),
        f"{len(elsewhere)}/{len(everyone)} succeeded on the rescuer; cooperative "
        f"{_tally(final, coop)}; non-cooperative {_tally(final, stubborn)}",
    )
    await h.finish(fault_at=sent, recovery=size.recovery)


async def _outcomes(h: Harness, jobs: list[UUID]) -> dict[Any, str]:
    """Each job's last attempt outcome (job_attempts; "none": no row)."""
    outcomes: dict[Any, str] = dict.fromkeys(jobs, "none")
    for row in await h.probe.attempts(jobs) or []:
        outcomes[row.job_id] = row.outcome
    return outcomes


def _tally(statuses: dict[Any, str], jobs: list[Any]) -> str:
    counts: dict[str, int] = {}
    for job in jobs:
        status = statuses.get(job, "missing")
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
