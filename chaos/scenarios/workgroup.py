"""Faults of a `taskq workgroup start`: a frozen child, and a SIGKILLed supervisor."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from chaos import actors
from chaos.harness import Harness
from chaos.procs import HEARTBEAT_INTERVAL, Workgroup, kill_stray, pid_alive, workgroup_toml

SUMMARY_STOP = "workgroup of 2; SIGSTOP a child with jobs in flight past its stale_after"
SUMMARY_KILL = "workgroup of 3; SIGKILL the supervisor: every child must exit on its own"


@dataclass(frozen=True, slots=True)
class Size:
    jobs: int
    processes: int
    concurrency: int
    stale_after: float
    check_interval: float
    orphan_deadline: float  # how long children may outlive a SIGKILLed supervisor
    recovery: float


STOP_FULL = Size(600, 2, 4, stale_after=5, check_interval=0.5, orphan_deadline=0, recovery=60)
STOP_SHORT = Size(200, 2, 4, stale_after=3, check_interval=0.5, orphan_deadline=0, recovery=40)
KILL_FULL = Size(600, 3, 4, stale_after=5, check_interval=0.5, orphan_deadline=10, recovery=60)
KILL_SHORT = Size(200, 3, 4, stale_after=5, check_interval=0.5, orphan_deadline=10, recovery=40)


async def _start_group(h: Harness, size: Size) -> tuple[Workgroup, dict[str, int]] | None:
    runtime = h.directory / "run"
    runtime.mkdir(exist_ok=True)
    toml = workgroup_toml(
        processes=size.processes,
        concurrency=size.concurrency,
        runtime_dir=runtime,
        stale_after=size.stale_after,
        check_interval=size.check_interval,
    )
    group = h.fleet.workgroup("workgroup", toml)

    async def children() -> dict[str, int] | None:
        pids = group.child_pids()
        return pids if len(pids) == size.processes else None

    pids = await h.wait_for(children, 30, give_up=lambda: not group.alive())
    if not h.check(
        "workgroup children registered",
        pids is not None and await h.registered(list(pids.values())),
        group.describe_exit(),
    ):
        return None
    assert pids is not None
    return group, pids


async def run_sigstop(h: Harness, short: bool) -> None:
    size = STOP_SHORT if short else STOP_FULL
    started = await _start_group(h, size)
    if started is None:
        return
    group, pids = started
    await h.enqueue([(actors.work, {"ms": ms}) for ms in h.durations(size.jobs, 200, 900)])

    async def busy_child() -> tuple[str, int] | None:
        markers = h.markers()
        for label, pid in pids.items():
            if len(markers.in_flight(pid)) >= 2:
                return label, pid
        return None

    found = await h.wait_for(busy_child, 20, step=0.05)
    if not h.check("a child has jobs in flight", found is not None):
        return
    assert found is not None
    label, victim = found
    victim_id = next((w for w, pid in (await h.worker_pids()).items() if pid == victim), None)
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.time()
    bodies = h.markers().in_flight(victim)
    held = [job for job, owner in await h.probe.running_owners() or () if owner == victim_id]
    h.note(f"stopped {label} with {len(bodies)} bodies running, {len(held)} jobs held")

    def stale_killed() -> dict[str, Any] | None:
        events = [e for e in group.events("child_stale_killed") if e.get("pid") == victim]
        return events[0] if events else None

    bound = size.stale_after + size.check_interval * 2 + 10
    event = await h.wait_until(stale_killed, bound, give_up=lambda: not group.alive())
    killed_after = time.time() - stopped_at
    h.check(
        "the supervisor SIGKILLs the stopped child",
        event is not None,
        f"no child_stale_killed for pid {victim} within {bound:g}s; {group.describe_exit()}",
    )
    if event is None:
        kill_stray(victim)
        return
    h.note(f"stale kill {killed_after:.1f}s after SIGSTOP (stale_after {size.stale_after:g}s)")
    detect_bound = size.stale_after + size.check_interval + 2
    # The supervisor times staleness from the child's last heartbeat, up to one heartbeat
    # interval before the SIGSTOP: the kill may come that much sooner than stale_after.
    early_bound = size.stale_after - HEARTBEAT_INTERVAL
    h.check(
        f"stale kill within stale_after - heartbeat interval ({early_bound:g}s)"
        f" and stale_after + check_interval + 2s ({detect_bound:g}s)",
        early_bound <= killed_after <= detect_bound,
        f"took {killed_after:.1f}s",
        timed=True,
    )

    def restarted() -> bool:
        return group.child_pids().get(label, victim) != victim

    h.check(
        "the child is restarted",
        await h.wait_until(restarted, 15) is not None,
        group.describe_exit(),
    )
    gone = await h.wait_until(lambda: not pid_alive(victim), 10)
    h.check("the stopped process is gone", gone is not None, f"pid {victim} still alive")
    jobs = sorted(set(held) | bodies)

    async def settled() -> dict[Any, str] | None:
        statuses = await h.probe.statuses(jobs)
        done = statuses is not None and all(s not in _UNFINISHED for s in statuses.values())
        return statuses if done else None

    statuses = await h.wait_for(settled, size.recovery, step=0.2)
    markers = h.markers()
    rerun = [job for job in bodies if markers.finished_by(job) - {victim}]
    ok = statuses is not None and all(s == "succeeded" for s in statuses.values())
    h.check(
        "the stopped child's jobs are reclaimed and succeed elsewhere",
        ok and len(rerun) == len(bodies),
        f"statuses {_tally(statuses)}; {len(rerun)}/{len(bodies)} bodies re-run by another pid",
    )
    await h.note_reclaims([(stopped_at, bodies)], "bodies of the stopped child")
    await h.finish(fault_at=stopped_at + killed_after, recovery=size.recovery)
    left = [pid for pid in group.every_child_pid() if pid_alive(pid)]
    h.check("no child left after the supervisor stops", not left, f"alive: {left}")


async def run_supervisor_kill(h: Harness, short: bool) -> None:
    size = KILL_SHORT if short else KILL_FULL
    started = await _start_group(h, size)
    if started is None:
        return
    group, pids = started
    await h.enqueue([(actors.work, {"ms": ms}) for ms in h.durations(size.jobs, 300, 900)])
    await h.started_bodies(size.processes * 2, timeout=20)
    group.signal(signal.SIGKILL)
    killed_at = time.time()
    await group.wait(5)
    children = sorted(pids.values())
    gone = await h.wait_until(
        lambda: not any(pid_alive(p) for p in children), size.orphan_deadline, step=0.05
    )
    left = [pid for pid in children if pid_alive(pid)]
    h.check(
        f"no orphan worker {size.orphan_deadline:g}s after the supervisor's SIGKILL",
        gone is not None,
        f"{len(left)} of {len(children)} children still running: {left}",
    )
    if gone is not None:
        h.note(f"children gone {time.time() - killed_at:.1f}s after the supervisor's SIGKILL")
    stray = [pid for pid in left if kill_stray(pid)]
    if stray:
        h.note(f"runner SIGKILLed {len(stray)} orphan(s) to go on")
    rescuer = h.fleet.worker("rescuer", concurrency=8)
    await h.registered([rescuer])
    await h.finish(fault_at=killed_at, recovery=size.recovery)


_UNFINISHED = ("pending", "scheduled", "running")


def _tally(statuses: dict[Any, str] | None) -> str:
    if statuses is None:
        return "not settled"
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
