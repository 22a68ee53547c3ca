"""Failure paths with real processes, real signals and a real database."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow
from taskq_core.client import JobsClient
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.e2e_actors:registry"
BASE_ENV = {
    "TASKQ_HEARTBEAT_INTERVAL": "0.5",
    "TASKQ_LOCK_LEASE": "3",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "1",
    "TASKQ_CLEANUP_GRACE_PERIOD": "1",
    "TASKQ_TERMINATION_GRACE_PERIOD": "20",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_SWEEP_INTERVAL": "0.5",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_LEVEL": "INFO",
}


class WorkerProcess:
    """A `taskq worker` child process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    async def wait(self, timeout: float = 30) -> tuple[int, str]:
        _, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        assert self.proc.returncode is not None
        return self.proc.returncode, err.decode()


@pytest.fixture
async def spawn(pg: PgTarget) -> AsyncIterator[Callable[..., Awaitable[WorkerProcess]]]:
    started: list[WorkerProcess] = []

    async def start(*extra: str, **env: str) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            TASKQ_BIN, "worker", "--actors", ACTORS, *extra,
            cwd=ROOT, env=pg.env(**{**BASE_ENV, **env}),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        worker = WorkerProcess(proc)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.returncode is None:
            worker.proc.kill()
        await worker.proc.communicate()


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def until(
    check: Callable[[], Awaitable[Any]], timeout: float = 15, step: float = 0.05
) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(step)


async def running(backend: PostgresBackend, job_id: UUID) -> JobRow | None:
    """The job once its body runs (status running and its start recorded; a claimed job
    waiting for a consumer does not count)."""
    job = await backend.get(job_id)
    if job is None or job.status is not JobStatus.RUNNING or job.started_at is None:
        return None
    return job


async def terminal(backend: PostgresBackend, job_id: UUID) -> JobRow | None:
    job = await backend.get(job_id)
    return job if job is not None and job.is_terminal else None


async def test_sigterm_mid_job_with_a_cooperative_actor_exits_0_inside_the_grace(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("sleepy", {"seconds": 60}))
    worker = await spawn()
    await until(lambda: running(backend, row.id))
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    code, err = await worker.wait()
    elapsed = time.monotonic() - sent
    assert code == 0, err
    assert elapsed < 1 + 1 + 3, elapsed  # cancellation + cleanup grace, plus process exit
    assert await backend.list_jobs(JobFilter(status="running")) == []


async def test_second_sigterm_escalates_to_forcing(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("oblivious", {"seconds": 60}))
    worker = await spawn(TASKQ_CANCELLATION_GRACE_PERIOD="10", TASKQ_LOCK_LEASE="15")
    await until(lambda: running(backend, row.id))
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    worker.signal(signal.SIGTERM)
    code, err = await worker.wait()
    assert code == 0, err
    assert time.monotonic() - sent < 5, "the second signal did not skip the 10 s grace"
    assert "shutdown_escalated" in err
    job = await backend.get(row.id)
    assert job is not None and job.status in (JobStatus.SCHEDULED, JobStatus.PENDING)
    assert job.attempts_used == 0, "a shutdown interruption must not use up an attempt"


async def test_a_deploy_records_the_interrupted_attempt_and_spends_no_budget(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("sleepy", {"seconds": 60}, max_attempts=1))
    worker = await spawn()
    await until(lambda: running(backend, row.id))
    worker.signal(signal.SIGTERM)
    code, err = await worker.wait()
    assert code == 0, err
    job = await backend.get(row.id)
    assert job is not None and (job.status, job.attempts_used) == (JobStatus.PENDING, 0)
    attempts = [(a.attempt, a.outcome) for a in await backend.get_attempts(row.id)]
    assert attempts == [(1, "interrupted")]
    last = (await backend.get_events(row.id))[-1]
    assert (last.to_status, last.detail) == (JobStatus.PENDING, {"reason": "shutdown"})


async def test_a_deploy_sends_a_job_that_outlives_the_graces_back_to_the_queue(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    """A plain ``def`` body runs past both graces: its attempt is abandoned and the job goes
    back to the queue (it was dropped for good: a deploy lost every long job), to run on
    the next worker."""
    row = await backend.enqueue(EnqueueArgs("long_first_run", {"seconds": 60}, max_attempts=3))
    worker = await spawn()
    await until(lambda: running(backend, row.id))
    worker.signal(signal.SIGTERM)
    code, err = await worker.wait()
    assert code == 0, err
    job = await backend.get(row.id)
    assert job is not None and (job.status, job.attempts_used) == (JobStatus.PENDING, 1)
    assert [a.outcome for a in await backend.get_attempts(row.id)] == ["abandoned"]
    rescuer = await spawn()
    done = await until(lambda: terminal(backend, row.id), timeout=20)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result == {"attempt": 2, "pid": rescuer.pid}
    assert [a.outcome for a in await backend.get_attempts(row.id)] == ["abandoned", "succeeded"]
    rescuer.signal(signal.SIGTERM)
    assert (await rescuer.wait())[0] == 0


async def test_non_cooperative_actor_is_forced_then_abandoned(
    pg: PgTarget, backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("stubborn", {"linger": 10}))
    worker = await spawn()
    await until(lambda: running(backend, row.id))
    async with JobsClient(pg.dsn, schema=pg.schema) as client:
        assert await client.cancel(row.id, reason="stop") == "requested"
    job = await until(lambda: terminal(backend, row.id), timeout=10)
    assert job.status is JobStatus.ABANDONED and job.cancel_phase == 2
    kinds = [(e.kind, e.to_status) for e in await backend.get_events(row.id)]
    assert ("cancel_request", None) in [(k, None) for k, _ in kinds]
    worker.signal(signal.SIGTERM)
    await worker.wait()


async def test_kill_9_mid_job_is_reclaimed_by_another_worker_and_retried(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("crash_once", {}, max_attempts=3))
    victim = await spawn("--concurrency", "1")
    await until(lambda: running(backend, row.id))
    rescuer = await spawn("--concurrency", "1")
    victim.proc.kill()
    await victim.wait()
    job = await until(lambda: terminal(backend, row.id), timeout=20)
    assert job.status is JobStatus.SUCCEEDED
    assert job.result["attempt"] == 2 and job.result["pid"] == rescuer.pid
    outcomes = [a.outcome for a in await backend.get_attempts(row.id)]
    assert outcomes == ["crashed", "succeeded"], outcomes
    reclaims = await backend.poll_reclaim_events(0, visibility_delay=timedelta(0))
    assert [e.job_id for e in reclaims] == [row.id]
    rescuer.signal(signal.SIGTERM)
    assert (await rescuer.wait())[0] == 0


async def test_running_job_cancelled_through_the_client_ends_within_two_seconds(
    pg: PgTarget, backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    row = await backend.enqueue(EnqueueArgs("sleepy", {"seconds": 60}))
    worker = await spawn(TASKQ_HEARTBEAT_INTERVAL="10", TASKQ_LOCK_LEASE="60",
                         TASKQ_CANCELLATION_GRACE_PERIOD="20", TASKQ_CLEANUP_GRACE_PERIOD="5",
                         TASKQ_TERMINATION_GRACE_PERIOD="40")  # fmt: skip
    await until(lambda: running(backend, row.id))
    async with JobsClient(pg.dsn, schema=pg.schema) as client:
        asked = time.monotonic()
        await client.cancel(row.id)
        job = await client.wait(row.id, timeout=5)
        latency = time.monotonic() - asked
    assert job.status is JobStatus.CANCELLED
    assert latency < 2.0, f"cancel took {latency:.2f}s (heartbeat is 10 s: NOTIFY must do it)"
    worker.signal(signal.SIGTERM)
    assert (await worker.wait())[0] == 0


async def test_worker_reconnects_after_its_connections_are_terminated(
    pg: PgTarget, backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    worker = await spawn()
    await until(lambda: backend.list_workers())
    first = await backend.enqueue(EnqueueArgs("echo", {"n": 1}))
    await until(lambda: terminal(backend, first.id))
    conn = await asyncpg.connect(pg.dsn)
    try:
        # Every session of this schema's TaskQ processes (pool, LISTEN, leader), and only
        # those: tests running beside this one share the database.
        killed = await conn.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND backend_type = 'client backend'
                 AND application_name = ANY ($1::text[])""",
            [f"taskq_{pg.schema}", f"taskq_listen_{pg.schema}", f"taskq_leader_{pg.schema}"],
        )
    finally:
        await conn.close()
    assert killed > 0
    await backend.close()
    fresh = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        rows = await fresh.enqueue_batch([EnqueueArgs("echo", {"n": n}) for n in range(20)])
        for row in rows:
            job = await until(lambda row=row: terminal(fresh, row.id), timeout=20)
            assert job.status is JobStatus.SUCCEEDED
    finally:
        await fresh.close()
    worker.signal(signal.SIGTERM)
    assert (await worker.wait())[0] == 0


async def test_killed_leader_is_replaced_within_the_sla(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    first = await spawn()
    leader = await until(lambda: backend.get_leader())
    second = await spawn()
    await until(lambda: _worker_count(backend, 2))
    first.proc.kill()
    killed_at = time.monotonic()
    await first.wait()

    async def new_leader() -> bool:
        row = await backend.get_leader()
        return row is not None and row.worker_id != leader.worker_id

    await until(new_leader, timeout=10, step=0.02)
    gap = time.monotonic() - killed_at
    assert gap <= 0.5 + 1.0, f"leader gap {gap:.2f}s exceeds heartbeat_interval + 1s"
    second.signal(signal.SIGTERM)
    assert (await second.wait())[0] == 0


async def _worker_count(backend: PostgresBackend, n: int) -> bool:
    return len([w for w in await backend.list_workers() if w.status == "running"]) >= n


async def test_health_endpoints_and_probe_exit_codes(
    tmp_path: Path, pg: PgTarget, backend: PostgresBackend,
    spawn: Callable[..., Awaitable[WorkerProcess]],
) -> None:  # fmt: skip
    sock = tmp_path / "health.sock"
    row = await backend.enqueue(EnqueueArgs("oblivious", {"seconds": 60}))
    worker = await spawn("--health-socket", str(sock), TASKQ_HEALTH_ENABLED="true",
                         TASKQ_CANCELLATION_GRACE_PERIOD="5", TASKQ_LOCK_LEASE="10")  # fmt: skip
    await until(lambda: running(backend, row.id))

    def probe(kind: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TASKQ_BIN, "health", kind, "--socket", str(sock)],
                              capture_output=True, text=True, timeout=10)  # fmt: skip

    live = await asyncio.to_thread(probe, "live")
    assert live.returncode == 0 and json.loads(live.stdout) == {"status": "ok"}
    ready = await asyncio.to_thread(probe, "ready")
    assert ready.returncode == 0, ready.stdout
    body = json.loads(ready.stdout)
    assert body["ready"] is True and body["active_jobs"] == 1
    worker.signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    draining = await asyncio.to_thread(probe, "ready")
    assert draining.returncode == 1
    assert json.loads(draining.stdout)["shutdown_phase"] in ("CANCELLING", "DRAINING")
    assert (await worker.wait())[0] == 0
    gone = await asyncio.to_thread(probe, "live")
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "Traceback" not in gone.stderr


async def test_blocked_event_loop_trips_the_watchdog_with_exit_2(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]]
) -> None:
    await backend.enqueue(EnqueueArgs("blocker", {"seconds": 20}))
    worker = await spawn(
        TASKQ_WATCHDOG_LOOP_LAG_BUDGET="1",
        TASKQ_WATCHDOG_LOOP_LAG_STARTUP_GRACE="0",
        TASKQ_WATCHDOG_CHECK_INTERVAL="0.2",
    )
    code, err = await worker.wait(timeout=15)
    assert code == 2
    assert "worker_watchdog_trip" in err and "loop-lag" in err
