"""The maintenance leader killed (kill -9) or frozen (SIGSTOP past its lease): another worker
must take over, reclaim its jobs and keep the maintenance going; a frozen leader, resumed,
must step down before it acts as leader.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from chaos import actors
from chaos.harness import Harness
from chaos.procs import HEARTBEAT_INTERVAL, LOCK_LEASE, Proc, pid_alive
from taskq_core.client import EnqueueItem

SUMMARY = "3 workers; SIGKILL the maintenance leader mid-drain, measure the failover gap"
SUMMARY_PAUSE = "3 workers; SIGSTOP the maintenance leader past its lease, then SIGCONT"
# The same bound as tests/e2e/test_resilience.py: one election round plus a second.
FAILOVER_SLA = HEARTBEAT_INTERVAL + 1.0
# A frozen leader's session (and lock) ends one lease after its last renewal, which came at
# most a heartbeat interval before the stop; another worker wins its next campaign.
PAUSE_FAILOVER_SLA = LOCK_LEASE + HEARTBEAT_INTERVAL + 1.0
# How long the runner waits for a resumed leader's step-down line (it comes before the
# leader's first pass, within milliseconds of SIGCONT: the note says how soon).
STEP_DOWN_BOUND = 10.0
# What only a leader logs: a resumed leader must log none of it before its step-down line.
LEADER_ACTIVITY = frozenset(
    {"sweep_ran", "schedule_fired", "stale_batch_completed", "stranded_queues", "prune_ran",
     "archive_expiry_ran", "stale_workers_deleted", "jobs_vacuumed"}
)  # fmt: skip
STEP_DOWN = frozenset({"leader_lease_lapsed", "leader_lost"})


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


@dataclass(frozen=True, slots=True)
class PauseSize:
    jobs: int
    concurrency: int
    freeze: float  # seconds the leader stays stopped
    delayed: int  # jobs that come due during the freeze (only a leader promotes them)
    recovery: float


FULL_PAUSE = PauseSize(jobs=1000, concurrency=4, freeze=20, delayed=20, recovery=60)
SHORT_PAUSE = PauseSize(jobs=300, concurrency=4, freeze=9, delayed=8, recovery=40)


@dataclass
class Freeze:
    """What the runner saw while the leader was stopped (epoch seconds)."""

    stopped_at: float
    idle_since: float | None = None  # the frozen leader's lock session: its last statement
    new_leader: UUID | None = None
    new_leader_at: float | None = None
    # The jobs the frozen leader still held when another worker took over (their leases had
    # run out by then, and a stopped process writes nothing), and when all were reclaimed.
    held: list[UUID] = field(default_factory=list)
    reclaimed_at: float | None = None
    resumed_at: float | None = None


async def run_pause(h: Harness, short: bool) -> None:
    size = SHORT_PAUSE if short else FULL_PAUSE
    workers = [h.fleet.worker(f"pause-lead-{i}", concurrency=size.concurrency) for i in (1, 2, 3)]
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
    victim = ours[(await h.worker_pids())[old]]
    # Freeze the leader while it runs bodies: their jobs must be reclaimed like anyone's.
    await h.wait_until(lambda: len(h.markers().in_flight(victim.pid)) >= size.concurrency, 20)
    # Due one by one during the freeze (the last well before its end): only a leader
    # promotes them.
    step = (size.freeze - 2.5) / size.delayed
    delays = [0.5 + i * step for i in range(size.delayed)]
    delayed = await h.enqueue(
        [EnqueueItem(actors.work, {"ms": 50}, delay=timedelta(seconds=d)) for d in delays]
    )
    due = dict(zip(delayed, (time.time() + d for d in delays), strict=True))
    victim.signal(signal.SIGSTOP)
    freeze = Freeze(time.time())
    t0 = time.monotonic()
    cut = h.markers().in_flight(victim.pid)
    freeze.idle_since = await _lock_session_idle_since(h)
    await _while_frozen(h, freeze, old, victim, size.freeze - (time.monotonic() - t0))
    freeze.resumed_at = time.time()  # before the signal: the process logs at once
    victim.signal(signal.SIGCONT)
    _check_failover(h, freeze)
    await _check_maintenance(h, freeze, due)
    await _check_step_down(h, victim, freeze)
    await h.finish(fault_at=freeze.resumed_at, recovery=size.recovery)
    await h.note_reclaims([(freeze.stopped_at, cut)], "bodies of the frozen leader")
    held = freeze.held
    statuses = await h.probe.statuses(held) or {}
    h.check(
        "the frozen leader's jobs are reclaimed while it is frozen, and succeed",
        freeze.reclaimed_at is not None
        and set(statuses.values()) <= {"succeeded"}
        and len(statuses) == len(held),
        f"{len(held)} held; reclaimed during the freeze: {freeze.reclaimed_at is not None}; "
        f"statuses {', '.join(sorted(set(statuses.values()))) or '-'}",
    )
    if freeze.reclaimed_at is not None:
        markers = h.markers()
        elsewhere = [job for job in held if markers.finished_by(job) - {victim.pid}]
        h.note(
            f"the frozen leader's {len(held)} jobs reclaimed "
            f"{freeze.reclaimed_at - freeze.stopped_at:.1f}s after SIGSTOP; {len(elsewhere)} "
            "finished on another worker (the rest waited in the queue for the resumed one)"
        )
    _check_one_leader_at_a_time(h, victim, freeze.resumed_at)


async def _lock_session_idle_since(h: Harness) -> float | None:
    """When the frozen leader's lock session last finished a statement (the server's clock):
    its lease runs out one lease later."""
    rows = await h.probe.fetch(
        "SELECT extract(epoch FROM a.state_change)::float8 AS t FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.granted AND a.application_name = 'taskq_leader_' || $1",
        h.schema,
    )
    return rows[0]["t"] if rows else None


async def _while_frozen(
    h: Harness, freeze: Freeze, old: UUID, victim: Proc, seconds: float
) -> None:
    """Watch the fleet for ``seconds`` while the leader is stopped: who leads, and when the
    frozen leader's jobs are reclaimed."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if freeze.new_leader is None:
            leader = await h.probe.leader()
            pid = (await h.worker_pids()).get(leader) if leader is not None else None
            if leader != old and pid is not None and pid != victim.pid and pid_alive(pid):
                freeze.new_leader, freeze.new_leader_at = leader, time.time()
                owners = await h.probe.running_owners() or []
                freeze.held = [job for job, owner in owners if owner == old]
        elif freeze.reclaimed_at is None:
            events = await h.probe.reclaims(freeze.held) or []
            if {job for job, _ in events} >= set(freeze.held):
                freeze.reclaimed_at = max((t for _, t in events), default=time.time())
        await asyncio.sleep(0.02)  # the freeze lasts this long: the fault, not a synchronization


def _check_failover(h: Harness, freeze: Freeze) -> None:
    ok = freeze.new_leader_at is not None
    h.check("another worker leads while the leader is frozen", ok, "no new leader")
    if freeze.new_leader_at is None:
        return
    gap = freeze.new_leader_at - freeze.stopped_at
    text = f"leader failover {gap:.2f}s after SIGSTOP (lease {LOCK_LEASE:g}s"
    if freeze.idle_since is not None:
        lapse = freeze.idle_since + LOCK_LEASE
        text += f"; {freeze.new_leader_at - lapse:.2f}s after the lease ran out"
    h.note(text + f"); {len(freeze.held)} jobs held by the frozen leader")
    h.check(
        f"failover within lease + heartbeat_interval + 1s ({PAUSE_FAILOVER_SLA:g}s) of SIGSTOP",
        gap <= PAUSE_FAILOVER_SLA,
        f"gap {gap:.2f}s",
        timed=True,
    )


async def _check_maintenance(h: Harness, freeze: Freeze, due: dict[UUID, float]) -> None:
    """Scheduled promotion ran on while the leader was frozen: each delayed job left
    ``scheduled`` by the time another worker led, or at its due time after that."""
    rows = await h.probe.fetch(
        "SELECT job_id, extract(epoch FROM min(occurred_at))::float8 AS t FROM {s}.job_events "
        "WHERE job_id = ANY($1::uuid[]) AND kind = 'state_change' "
        "AND from_status = 'scheduled' AND to_status = 'pending' GROUP BY 1",
        list(due),
    )
    promoted = {r["job_id"]: r["t"] for r in rows or ()}
    in_freeze = [job for job in due if promoted.get(job, float("inf")) < (freeze.resumed_at or 0)]
    h.check(
        "maintenance goes on during the freeze (delayed jobs promoted before SIGCONT)",
        len(in_freeze) == len(due),
        f"{len(in_freeze)} of {len(due)} promoted before SIGCONT",
    )
    if not promoted or freeze.new_leader_at is None:
        return
    lateness = sorted(promoted[job] - due[job] for job in promoted)
    resumed = min(promoted.values()) - freeze.stopped_at
    h.note(
        f"scheduled promotion resumed {resumed:.2f}s after SIGSTOP; delayed jobs promoted "
        f"{statistics.median(lateness):.2f}s (median), {lateness[-1]:.2f}s (max) after due"
    )
    h.check(
        f"scheduled promotion resumes within {PAUSE_FAILOVER_SLA:g}s + 0.5s of SIGSTOP",
        resumed <= PAUSE_FAILOVER_SLA + 0.5,
        f"first promotion {resumed:.2f}s after SIGSTOP",
        timed=True,
    )


async def _check_step_down(h: Harness, victim: Proc, freeze: Freeze) -> None:
    """The resumed leader steps down before any leader pass, and soon."""
    resumed = freeze.resumed_at or time.time()

    def stepped_down() -> dict[str, Any] | None:
        return next(
            (r for r in victim.records() if r.get("event") in STEP_DOWN and _at(r) >= resumed),
            None,
        )

    line = await h.wait_until(stepped_down, STEP_DOWN_BOUND, step=0.05)
    h.check(
        f"the resumed leader logs its step-down within {STEP_DOWN_BOUND:g}s",
        line is not None,
        "no leader_lease_lapsed or leader_lost line after SIGCONT",
    )
    if line is None:
        return
    h.note(f"the resumed leader stepped down {_at(line) - resumed:.3f}s after SIGCONT")
    acted = [
        str(r.get("event"))
        for r in victim.records()
        if r.get("event") in LEADER_ACTIVITY and resumed <= _at(r) < _at(line)
    ]
    h.check(
        "the resumed leader does not act as leader before it steps down",
        not acted,
        ", ".join(acted),
    )


def _check_one_leader_at_a_time(h: Harness, victim: Proc, resumed: float | None) -> None:
    """From the workers' logs: once the resumed leader stepped down, no two workers lead at
    once (a frozen leader cannot log its own end, so the check starts there)."""
    terms: list[tuple[str, float, float]] = []
    for proc in h.fleet.procs:
        began: float | None = None
        for record in proc.records():
            event = record.get("event")
            if event == "leader_elected" and began is None:
                began = _at(record)
            elif event in (*STEP_DOWN, "worker_stopping") and began is not None:
                terms.append((proc.name, began, _at(record)))
                began = None
        if began is not None:
            terms.append((proc.name, began, float("inf")))
    downs = [_at(r) for r in victim.records() if r.get("event") in STEP_DOWN]
    stepped = min((t for t in downs if resumed is not None and t >= resumed), default=None)
    if stepped is None:
        return  # _check_step_down reported it
    after = [(name, max(a, stepped), b) for name, a, b in terms if b > stepped]
    clashes = [
        f"{x[0]} and {y[0]}"
        for x, y in itertools.combinations(after, 2)
        if x[0] != y[0] and x[1] < y[2] and y[1] < x[2]
    ]
    h.check("no two workers lead at once after the step-down", not clashes, "; ".join(clashes))


def _at(record: dict[str, Any]) -> float:
    """A log record's time, epoch seconds."""
    try:
        return datetime.fromisoformat(str(record.get("timestamp"))).timestamp()
    except ValueError:
        return 0.0
