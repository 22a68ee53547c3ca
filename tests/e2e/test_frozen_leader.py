"""A frozen leader (SIGSTOP) loses the leadership it can no longer renew, and maintenance goes on.

Three real `taskq worker` processes; the leader is stopped while it runs jobs. Its session to
PostgreSQL stays open (the kernel answers for a stopped process), so a session lock alone kept
it leading, and no sweep ran, for as long as it was frozen. Now, while it is still frozen,
another worker must lead, reclaim the frozen leader's expired jobs and see them finish
elsewhere, and promote a delayed job that comes due. Resumed, the old leader steps down
before acting as leader and does not take the leadership back while its successor holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.test_resilience import BASE_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# The freeze here lasts a few seconds past the 3 s lease; the watchdogs' tolerance of a
# stopped process is not what this test is about.
ENV = {**BASE_ENV, "TASKQ_WATCHDOG_STALE_FLOOR": "60"}
# What a leader logs when its lease or lock goes.
LOSSES = {"leader_lease_lapsed", "leadership_lost", "leader_lost"}


class Worker:
    """A `taskq worker` process logging JSON to a file of its own."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def events(self) -> list[str]:
        names = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    names.append(str(json.loads(line).get("event")))
        return names

    def describe(self) -> str:
        tail = self.log.read_text(errors="replace").splitlines()[-5:]
        return f"pid {self.proc.pid} exit {self.proc.poll()}: " + " | ".join(tail)


@pytest.fixture
def workers(pg: PgTarget, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    for n in (1, 2, 3):
        log = tmp_path / f"worker-{n}.log"
        with log.open("wb") as sink:
            argv = [TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry"]
            proc = subprocess.Popen(
                [*argv, "--concurrency", "4"],
                cwd=ROOT, env=pg.env(**ENV), stdout=sink, stderr=sink,
            )  # fmt: skip
        started.append(Worker(proc, log))
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
            worker.proc.kill()
        worker.proc.wait()


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{check.__name__}: not met within {timeout}s"
        await asyncio.sleep(0.05)


async def test_a_frozen_leader_is_replaced_and_its_jobs_and_maintenance_go_on(
    backend: PostgresBackend, workers: list[Worker]
) -> None:
    by_pid = {w.proc.pid: w for w in workers}
    await backend.enqueue_batch_fast([EnqueueArgs("sleepy", {"seconds": 1.5}) for _ in range(40)])

    async def leader_with_running_jobs() -> tuple[UUID, list[UUID]] | None:
        row = await backend.get_leader()
        pids = {w.id: w.pid for w in await backend.list_workers()}
        if row is None or pids.get(row.worker_id) not in by_pid or len(pids) < 3:
            return None
        held = [
            job.id
            for job in await backend.list_jobs(JobFilter(status="running", limit=None))
            if job.locked_by_worker == row.worker_id and job.started_at is not None
        ]
        return (row.worker_id, held) if held else None

    old, held = await until(leader_with_running_jobs)
    pids = {w.id: w.pid for w in await backend.list_workers()}
    frozen = by_pid[pids[old]]
    # Due during the freeze: only a leader's scheduled promotion can start it.
    delayed = await backend.enqueue(EnqueueArgs("echo", {"n": 1}, delay=timedelta(seconds=2)))
    frozen.proc.send_signal(signal.SIGSTOP)

    async def another_leader() -> UUID | None:
        row = await backend.get_leader()
        return row.worker_id if row is not None and row.worker_id != old else None

    new = await until(another_leader)
    assert pids[new] != frozen.proc.pid

    async def held_jobs_finished_elsewhere() -> bool:
        rows = await backend.list_jobs(JobFilter(ids=held, limit=None))
        return all(job.status is JobStatus.SUCCEEDED for job in rows)

    await until(held_jobs_finished_elsewhere)
    for job_id in held:
        assert any(e.kind == "reclaim" for e in await backend.get_events(job_id))

    async def promoted_and_run() -> bool:
        job = await backend.get(delayed.id)
        return job is not None and job.status is JobStatus.SUCCEEDED

    await until(promoted_and_run)
    assert frozen.proc.poll() is None  # all of the above while the old leader was frozen

    frozen.proc.send_signal(signal.SIGCONT)

    async def stepped_down() -> bool:  # and then found its lock gone on its next campaign
        events = frozen.events()
        return "leader_lease_lapsed" in events and "leadership_lost" in events

    await until(stepped_down)
    events = frozen.events()
    successor = by_pid[pids[new]]
    if "leader_elected" in events[events.index("leader_lease_lapsed") :]:
        # Taking the lead back is right only when the successor lost its own lock first (on
        # a loaded machine its campaigns can slip past the lease too); never while it holds it.
        async def successor_lost_it() -> bool:
            return bool(LOSSES & set(successor.events()))

        await until(successor_lost_it, timeout=10)
    else:
        row = await backend.get_leader()
        assert row is not None and row.worker_id == new

    async def all_done() -> bool:
        return not await backend.list_jobs(JobFilter(active=True, limit=None))

    await until(all_done)
    finished = await backend.list_jobs(JobFilter(limit=None))
    assert {job.status for job in finished} == {JobStatus.SUCCEEDED} and len(finished) == 41
    for worker in workers:
        worker.proc.terminate()
    for worker in workers:
        assert await asyncio.to_thread(worker.proc.wait, 30) == 0, worker.describe()
