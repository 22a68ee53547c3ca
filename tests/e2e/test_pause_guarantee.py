"""The execution guarantee through a real SIGSTOP of a real `taskq worker` (a VM pause, a long
GC stop, a laptop lid), on a real PostgreSQL: one regression test per defect of issue 32's
items 1-3.

Each test runs a worker under test (``stopped``: the queue's only consumer unless a test adds
one) and a second worker on another queue that leads, so it is the one that reclaims what the
stopped worker held once its lease ran out. Bodies write their start and end to the per-body
ledger (``chaos.markers``); the tests wait on rows and ledger lines, never on sleeps, and
assert on what ran, never on how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import psutil  # type: ignore[import-untyped]
import pytest

from chaos.markers import ENV_VAR, Body, Markers
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobRow
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.pause_actors import QUEUE

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.pause_actors:registry"
HEARTBEAT = 0.25
ENV = {
    "TASKQ_HEARTBEAT_INTERVAL": str(HEARTBEAT),
    "TASKQ_LOCK_LEASE": "1.5",
    "TASKQ_SWEEP_INTERVAL": "0.2",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "0.3",
    "TASKQ_CLEANUP_GRACE_PERIOD": "0.3",
    "TASKQ_TERMINATION_GRACE_PERIOD": "10",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_POLL_INTERVAL": "0.2",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_FORMAT": "json",
}
T = TypeVar("T")


@dataclass
class Worker:
    """A `taskq worker` child process; its log is a file (a full pipe would block it)."""

    proc: asyncio.subprocess.Process
    log: Path
    id: UUID  # its workers row

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stopped(self) -> bool:
        return bool(psutil.Process(self.pid).status() == psutil.STATUS_STOPPED)


@dataclass
class World:
    """One test's database, worker launcher and ledger."""

    pg: PgTarget
    backend: PostgresBackend
    start: Callable[..., Awaitable[Worker]]
    ledger: Path
    tmp: Path

    def bodies(self, job: UUID) -> list[Body]:
        return Markers.read(self.ledger).bodies_of(job)

    async def enqueue(self, actor: str, **payload: Any) -> UUID:
        return (await self.backend.enqueue(EnqueueArgs(actor, payload, queue=QUEUE))).id

    async def job(self, job: UUID) -> JobRow:
        row = await self.backend.get(job)
        assert row is not None
        return row

    async def db_now(self) -> datetime:
        """The database's clock (the one rows are stamped with)."""
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
        finally:
            await conn.close()
        return now

    @contextlib.asynccontextmanager
    async def row_locked(self, job: UUID) -> AsyncIterator[Callable[[], Awaitable[bool]]]:
        """Hold ``job``'s row locked (as a long transaction would) until the block ends;
        yields a check: whether another session waits for that lock."""
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            async with conn.transaction():
                await conn.execute(
                    f"SELECT 1 FROM {self.pg.schema}.jobs WHERE id = $1 FOR UPDATE", job
                )
                me = await conn.fetchval("SELECT pg_backend_pid()")

                async def someone_waits() -> bool:
                    return bool(
                        await conn.fetchval(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE $1::int = ANY (pg_blocking_pids(pid))",
                            me,
                        )
                    )

                yield someone_waits
        finally:
            await conn.close()


async def until(check: Callable[[], Awaitable[T | None]], what: str = "", timeout: float = 30) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or check.__name__}: not met within {timeout:g}s")
        await asyncio.sleep(0.02)
    return value


@pytest.fixture
async def world(pg: PgTarget, tmp_path: Path) -> AsyncIterator[World]:
    """The leader (started first, on a queue of its own) and a launcher for more workers."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    ledger = tmp_path / "ledger.txt"
    killed: list[asyncio.subprocess.Process] = []  # at the end, stopped or not

    async def start(name: str, *args: str, **env: str) -> Worker:
        log = tmp_path / f"{name}.log"
        with log.open("ab") as sink:
            proc = await asyncio.create_subprocess_exec(
                TASKQ_BIN, "worker", "--actors", ACTORS, "--label", name, *args,
                cwd=ROOT, env=pg.env(**ENV, **{ENV_VAR: str(ledger)}, **env),
                stdout=sink, stderr=sink,
            )  # fmt: skip
        killed.append(proc)

        async def registered() -> UUID | None:
            rows = await backend.list_workers()
            return next((w.id for w in rows if w.pid == proc.pid), None)

        return Worker(proc, log, await until(registered, f"{name} registered"))

    try:
        leader = await start("leader", "--queues", "elsewhere", "--concurrency", "1")

        async def leads() -> bool:
            row = await backend.get_leader()
            return row is not None and row.worker_id == leader.id

        await until(leads, "the first worker leads")
        yield World(pg, backend, start, ledger, tmp_path)
    finally:
        for proc in killed:
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            await proc.wait()
        await backend.close()
        print(f"worker logs and ledger in {tmp_path}")


async def _started(world: World, job: UUID, worker: Worker) -> bool:
    return any(b.pid == worker.pid for b in world.bodies(job))


async def _start_recorded(world: World, job: UUID) -> bool:
    return (await world.job(job)).started_at is not None


async def _claimed_unstarted(world: World, job: UUID, worker: Worker) -> JobRow | None:
    row = await world.job(job)
    held = row.status is JobStatus.RUNNING and row.locked_by_worker == worker.id
    return row if held and row.started_at is None else None


async def _reclaimed(world: World, held: JobRow) -> bool:
    """The holding ``held`` is not the job's lease any more (the leader took it back)."""
    row = await world.job(held.id)
    return row.status is not JobStatus.RUNNING or row.attempt != held.attempt


async def _succeeded(world: World, job: UUID) -> bool:
    return (await world.job(job)).status is JobStatus.SUCCEEDED


async def test_a_prefetched_job_whose_lease_ran_out_in_a_stop_is_not_started_after_it(
    world: World,
) -> None:
    # One consumer, one prefetched job: `first` runs (until its gate opens), `second` waits
    # in the worker's local queue, claimed. The worker is stopped past the lease and the
    # leader takes `second` back; when the worker resumes, `first` ends and the consumer
    # reaches `second`'s holding, whose lease is gone: it must drop it, not run it.
    stopped = await world.start("stopped", "--queues", QUEUE, "--concurrency", "1",
                                TASKQ_PREFETCH="1")  # fmt: skip
    gate = world.tmp / "gate"
    first = await world.enqueue("gated", gate=str(gate))
    second = await world.enqueue("quick")
    await until(lambda: _started(world, first, stopped), "first started")
    held = await until(lambda: _claimed_unstarted(world, second, stopped), "second claimed")
    stopped.stop()
    await until(lambda: _reclaimed(world, held), "held reclaimed")
    gate.touch()
    stopped.resume()
    await until(lambda: _succeeded(world, second), "second succeeded")

    bodies = world.bodies(second)
    assert len(bodies) == 1 and bodies[0].attempt > held.attempt, (
        f"one body, claimed after the stop (the holding was attempt {held.attempt}): "
        + "; ".join(b.describe() for b in bodies)
    )


async def test_a_body_whose_start_was_never_written_keeps_its_own_attempt_number(
    world: World,
) -> None:
    # A body ends while the worker's completer is stuck on an earlier flush (the test holds
    # that job's row), so its start and its success wait there, unwritten, when the worker is
    # stopped past the lease: the reclaim sees no start. The next body must run under a new
    # attempt number, and the attempt history must list both bodies.
    stopped = await world.start("stopped", "--queues", QUEUE, "--concurrency", "1",
                                TASKQ_PREFETCH="0")  # fmt: skip
    gate = world.tmp / "gate"
    earlier = await world.enqueue("gated", gate=str(gate))

    async def earlier_started() -> bool:
        return (await world.job(earlier)).started_at is not None

    await until(earlier_started)
    async with world.row_locked(earlier) as waiting:
        gate.touch()  # its success goes to the completer, whose flush waits for the row
        await until(waiting)
        job = await world.enqueue("quick")

        async def body_ended() -> bool:
            return any(b.ended is not None for b in world.bodies(job))

        await until(body_ended)
        held = await world.job(job)
        assert held.status is JobStatus.RUNNING and held.started_at is None
        stopped.stop()
    await until(lambda: _reclaimed(world, held), "held reclaimed")
    stopped.resume()
    await until(lambda: _succeeded(world, job), "job succeeded")

    bodies = world.bodies(job)
    numbers = [b.attempt for b in bodies]
    history = await world.backend.get_attempts(job)
    ran = f"bodies: {'; '.join(b.describe() for b in bodies)}; history: " + ", ".join(
        f"{a.attempt} {a.outcome}" for a in history
    )
    assert len(bodies) == 2 and numbers[0] < numbers[1], ran  # each its own, later number
    assert set(numbers) <= {a.attempt for a in history}, ran


async def test_a_resumed_worker_starts_no_body_of_a_job_that_succeeded_elsewhere(
    world: World,
) -> None:
    # As in the first test, `second` waits prefetched in the stopped worker. While it is
    # stopped the leader takes `second` back and another consumer of the queue runs it to
    # success. The resumed worker must not start it again.
    stopped = await world.start("stopped", "--queues", QUEUE, "--concurrency", "1",
                                TASKQ_PREFETCH="1")  # fmt: skip
    gate = world.tmp / "gate"
    first = await world.enqueue("gated", gate=str(gate))
    second = await world.enqueue("quick")
    await until(lambda: _started(world, first, stopped), "first started")
    # The other worker's one consumer must take `second` (gated `first` would hold it). Taken
    # back, a started `first` is a retry due after its backoff, behind `second`, which keeps
    # its place: so its start mark must be on the row before the stop (a start the stop kept
    # unwritten gives `first` back unstarted, in its place ahead), and `other` starts once
    # the leader has taken `second` back (before, it could find only `first`).
    await until(lambda: _start_recorded(world, first), "first's start recorded")
    held = await until(lambda: _claimed_unstarted(world, second, stopped), "second claimed")
    stopped.stop()
    await until(lambda: _reclaimed(world, held), "second taken back")
    other = await world.start("other", "--queues", QUEUE, "--concurrency", "1")
    await until(lambda: _succeeded(world, second), "second succeeded")
    gate.touch()
    await until(lambda: _succeeded(world, first), "first succeeded")  # on the other worker
    other.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(other.proc.wait(), 30) == 0
    # The stopped worker's only consumer takes its local queue in order: once this job (claimed
    # after the resume) has run there, the worker has dealt with `second`'s holding.
    after = await world.enqueue("quick")
    stopped.resume()
    await until(lambda: _started(world, after, stopped), "after started")

    ended = (await world.job(second)).finished_at
    assert ended is not None
    late = [b for b in world.bodies(second) if b.started > ended.timestamp()]
    assert not late, (
        f"`second` succeeded at {ended.timestamp():.3f}; bodies started after: "
        + "; ".join(b.describe() for b in late)
    )


@pytest.mark.parametrize("actor", ["gated", "gated_thread"])
async def test_two_bodies_of_one_job_never_run_at_once_in_one_worker(
    world: World, actor: str
) -> None:
    # A body runs (until its gate opens: an async body's cancel waits for it too, and no
    # cancel stops a thread) when its worker is stopped past the lease. The leader takes the
    # job back and the resumed worker, with a consumer free, claims it again: the new body
    # must wait until the old one has ended.
    stopped = await world.start("stopped", "--queues", QUEUE, "--concurrency", "2",
                                TASKQ_PREFETCH="0")  # fmt: skip
    gate = world.tmp / "gate"
    job = await world.enqueue(actor, gate=str(gate))

    async def running() -> JobRow | None:
        row = await world.job(job)
        started = row.started_at is not None and await _started(world, job, stopped)
        return row if started else None

    held = await until(running)
    stopped.stop()
    await until(lambda: _reclaimed(world, held), "held reclaimed")
    stopped.resume()
    resumed = await world.db_now()

    async def worker_went_on() -> bool:
        # A second body started, or the worker's heartbeat has come round a few times since
        # it resumed: it has claimed the job again (a NOTIFY of the reclaim waits for it) and
        # done whatever it does with that claim while the old body runs.
        if len(world.bodies(job)) > 1:
            return True
        seen = {w.id: w.last_seen_at for w in await world.backend.list_workers()}
        return (seen[stopped.id] - resumed).total_seconds() > 3 * HEARTBEAT

    await until(worker_went_on)
    gate.touch()
    await until(lambda: _succeeded(world, job), "job succeeded")

    bodies = world.bodies(job)
    together = [
        (a, b) for i, a in enumerate(bodies) for b in bodies[i + 1 :]
        if a.pid == b.pid and a.overlaps(b)
    ]  # fmt: skip
    assert not together, "; ".join(f"{a.describe()} while {b.describe()}" for a, b in together)
    assert len(bodies) >= 2
