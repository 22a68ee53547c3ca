"""SIGSTOP/SIGCONT rounds past the lease: what a VM pause, a long GC stop or a laptop lid does.

Two phases run side by side, each on a queue of its own served by one worker that is stopped
for longer than its lease, round after round, while a second worker (serving another queue,
never stopped) leads and reclaims what the stopped one held:

- backlog: a prefetched backlog (TASKQ_PREFETCH high; the queue is topped up at every resume
  and before every stop, which waits until the worker holds its prefetch), with a
  never-stopped second consumer of the same queue that runs what the leader took back;
- trickle: a steady enqueue while the worker runs and stops, prefetch 0, no other consumer.

Half the jobs are ``async def``, half plain ``def`` (threads a cancel cannot stop), 5-50 ms.
The ledger is kept per body (``chaos.markers``), and the execution guarantee is checked
against it: no two bodies of one job at once in one worker, no body started after its job
ended, no attempt number under two bodies, every body in the attempt history, nothing lost,
nothing stuck, no worker exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from uuid import UUID

from chaos import actors
from chaos.db import AttemptInfo
from chaos.harness import Harness, example
from chaos.markers import Body
from chaos.procs import Proc
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.client import EnqueueItem, JobsClient

SUMMARY = "SIGSTOP a worker past its lease, in rounds (prefetched backlog; trickle); async and def"
LEADER_QUEUE = "pause_leader"  # the leader's queue: no job ever goes there
TRICKLE_STEP = 0.02  # the trickle enqueues one small batch this often (a claim each)


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    backlog: int  # pending jobs the queue is topped up to at the start, each resume and stop
    rate: float  # jobs per second enqueued while the rounds run
    rounds: int
    running: float  # seconds the worker runs between two stops
    # Seconds each stop lasts: 1-1.5 s past the 3 s lease (a lease renewed just before the
    # stop runs out, the leader's 0.5 s sweep reclaims it, and its jobs wait a while).
    stopped: float
    concurrency: int
    prefetch: int
    peer_concurrency: int  # a never-stopped second consumer of the queue (0: none)

    @property
    def queue(self) -> str:
        return f"pause_{self.name}"


@dataclass(frozen=True, slots=True)
class Size:
    phases: tuple[Phase, ...]
    recovery: float


FULL = Size(
    phases=(
        Phase("backlog", backlog=4000, rate=0, rounds=12, running=1.5, stopped=4.5,
              concurrency=32, prefetch=300, peer_concurrency=2),
        Phase("trickle", backlog=0, rate=150, rounds=30, running=1, stopped=4,
              concurrency=32, prefetch=0, peer_concurrency=0),
    ),
    recovery=90,
)  # fmt: skip
SHORT = Size(
    phases=(
        Phase("backlog", backlog=600, rate=0, rounds=4, running=1.5, stopped=4.5,
              concurrency=32, prefetch=150, peer_concurrency=2),
        Phase("trickle", backlog=0, rate=80, rounds=5, running=1, stopped=4,
              concurrency=32, prefetch=0, peer_concurrency=0),
    ),
    recovery=45,
)  # fmt: skip


@dataclass
class PhaseRun:
    """One phase's processes and what it did."""

    phase: Phase
    victim: Proc
    peer: Proc | None
    groups: dict[UUID, str]  # the harness's job_groups: the checks count per phase
    jobs: set[UUID] = field(default_factory=set)
    stops: int = 0
    last_resume: float | None = None

    def procs(self) -> list[Proc]:
        return [self.victim] + ([self.peer] if self.peer is not None else [])

    def add(self, jobs: list[UUID]) -> None:
        self.jobs.update(jobs)
        self.groups.update(dict.fromkeys(jobs, self.phase.name))


async def run(h: Harness, short: bool) -> None:
    size = SHORT if short else FULL
    leader = h.fleet.worker("leader", concurrency=1, queues=(LEADER_QUEUE,))
    if not h.check("leader registered", await h.registered([leader])):
        return
    if not h.check("the never-stopped worker leads", await _leads(h, leader)):
        return
    runs = [_start(h, phase) for phase in size.phases]
    if not h.check("workers registered", await h.registered([p for r in runs for p in r.procs()])):
        return
    await asyncio.gather(*(_run_phase(h, r) for r in runs))
    everyone = [leader, *(p for r in runs for p in r.procs())]
    died = [p for p in everyone if not p.alive()]
    h.check(
        "no worker exits during the rounds", not died, "; ".join(p.describe_exit() for p in died)
    )
    h.note(", ".join(f"{r.phase.name}: {len(r.jobs)} jobs, {r.stops} stops" for r in runs))
    resumed = [r.last_resume for r in runs if r.last_resume is not None]
    await h.finish(fault_at=max(resumed) if resumed else None, recovery=size.recovery)
    await _check_history(h, runs)


async def _leads(h: Harness, proc: Proc) -> bool:
    """Wait until ``proc`` is the maintenance leader (it started first, alone)."""

    async def check() -> bool:
        leader = await h.probe.leader()
        return leader is not None and (await h.worker_pids()).get(leader) == proc.pid

    return bool(await h.wait_for(check, 30))


def _start(h: Harness, phase: Phase) -> PhaseRun:
    victim = h.fleet.worker(
        f"{phase.name}-stopped",
        concurrency=phase.concurrency,
        queues=(phase.queue,),
        TASKQ_PREFETCH=str(phase.prefetch),
    )
    peer = None
    if phase.peer_concurrency:
        peer = h.fleet.worker(
            f"{phase.name}-peer", concurrency=phase.peer_concurrency, queues=(phase.queue,)
        )
    return PhaseRun(phase, victim, peer, h.job_groups)


def _items(h: Harness, phase: Phase, count: int) -> list[EnqueueItem]:
    """``count`` jobs of 5-50 ms, alternately ``async def`` and plain ``def``."""
    kinds = (actors.work, actors.work_thread)
    return [
        EnqueueItem(kinds[n % 2], {"ms": ms}, queue=phase.queue)
        for n, ms in enumerate(h.durations(count, 5, 50))
    ]


async def _run_phase(h: Harness, run: PhaseRun) -> None:
    phase = run.phase
    await _top_up(h, run)
    done = asyncio.Event()
    trickle = asyncio.create_task(_trickle(h, run, done)) if phase.rate else None
    try:
        if not await h.started_bodies(1, timeout=15):
            return
        with _continued_at_the_end(run.victim):
            for _ in range(phase.rounds):
                await asyncio.sleep(phase.running)  # the fault's cadence, not a synchronization
                await _prefetched(h, run)
                if not run.victim.alive():
                    return
                run.victim.signal(signal.SIGSTOP)
                run.stops += 1
                await asyncio.sleep(phase.stopped)
                run.victim.signal(signal.SIGCONT)
                run.last_resume = time.time()
                await _top_up(h, run)
    finally:
        done.set()
        if trickle is not None:  # it ends between two batches: every job it made is counted
            await trickle


@contextlib.contextmanager
def _continued_at_the_end(proc: Proc) -> Iterator[None]:
    """Whatever ends the rounds, the worker is not left stopped."""
    try:
        yield
    finally:
        proc.signal(signal.SIGCONT)


async def _top_up(h: Harness, run: PhaseRun) -> None:
    """Enqueue what the queue lacks of the phase's backlog (the worker drains it fast)."""
    if not run.phase.backlog:
        return
    pending = await h.probe.pending(run.phase.queue)
    if pending is not None and pending < run.phase.backlog:
        run.add(await h.enqueue(_items(h, run.phase, run.phase.backlog - pending)))


async def _prefetched(h: Harness, run: PhaseRun) -> None:
    """Before a stop of the backlog phase: top the queue up again and wait (bounded) until
    the worker holds its prefetch, so the stop catches it holding claimed jobs."""
    if not run.phase.backlog:
        return
    await _top_up(h, run)

    # The producer claims again once half its capacity is free: past that, it holds its
    # prefetch (and the other consumer holds a few).
    enough = (run.phase.concurrency + run.phase.prefetch) // 2

    async def holding() -> bool:
        held = await h.probe.running_in(run.phase.queue)
        return held is not None and held >= enough

    if not await h.wait_for(holding, 5, step=0.02):
        h.note(f"{run.phase.name}: a stop came before the worker held its prefetch")


async def _trickle(h: Harness, run: PhaseRun, done: asyncio.Event) -> None:
    """Enqueue ``rate`` jobs a second, in batches every TRICKLE_STEP, until ``done``."""
    per_step = max(1, round(run.phase.rate * TRICKLE_STEP))
    backend = await PostgresBackend.connect(h.dsn, h.schema, min_size=1, max_size=2)
    try:
        async with JobsClient(backend=backend) as client:
            next_at = time.monotonic()
            while not done.is_set():
                rows = await client.enqueue_batch(_items(h, run.phase, per_step))
                run.add([row.id for row in rows])
                h.result.jobs += len(rows)
                next_at += TRICKLE_STEP
                # The trickle's pace (a cadence, not a synchronization).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), max(0.0, next_at - time.monotonic()))
    finally:
        await backend.close()


async def _check_history(h: Harness, runs: list[PhaseRun]) -> None:
    """With no process killed, every body that ran has its own attempt row, and every job
    succeeded with a body that ran to its end (``finish`` checked the rest of the guarantee)."""
    jobs = [job for r in runs for job in r.jobs]
    markers = h.markers()
    attempts = await h.probe.attempts(jobs)
    statuses = await h.probe.statuses(jobs)
    if attempts is None or statuses is None:
        h.check("every body is in the attempt history", False, "database unreachable")
        return
    unrecorded = _bodies_missing(markers.bodies(), attempts, set(jobs))
    h.check(
        "every body is in the attempt history",
        not unrecorded,
        f"{len(unrecorded)} bodies without a job_attempts row of their own: "
        + h.tally([b.job_id for b in unrecorded])
        + example([f"job {b.job_id} body {b.describe()}" for b in unrecorded]),
    )
    done = markers.done_counts()
    lost = [job for job in jobs if statuses.get(job) != "succeeded" or not done[job]]
    h.check(
        "nothing lost: every job succeeded, with a body that ran to its end",
        not lost,
        h.tally(lost),
    )


def _bodies_missing(bodies: list[Body], attempts: list[AttemptInfo], jobs: set[UUID]) -> list[Body]:
    """The bodies the attempt history leaves out: each body needs a row of its own (job,
    attempt), so two bodies under one number with one row leave one out."""
    rows = Counter((row.job_id, row.attempt) for row in attempts)
    missing: list[Body] = []
    for body in bodies:
        key = (body.job_id, body.attempt)
        if body.job_id not in jobs:
            continue
        if rows[key]:
            rows[key] -= 1
        else:
            missing.append(body)
    return missing
