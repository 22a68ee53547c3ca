"""A standalone worker survives its database: restarts and an outage, on a server of its own.

Each test starts a PostgreSQL server in a directory of its own (never the shared one), runs a
real `taskq worker` process against it, restarts or stops the server for real, and checks
from the database that the worker kept running and drained everything without a restart.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chaos.pgserver import PrivateServer
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.conftest import PRIVATE_SCHEMA
from tests.e2e.test_resilience import BASE_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = PRIVATE_SCHEMA
ENV = BASE_ENV  # the short cadences of the other failure-path tests


@pytest.fixture
async def workers(
    server: PrivateServer, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[subprocess.Popen[bytes]]]]:
    started: list[subprocess.Popen[bytes]] = []

    async def start(*extra: str) -> subprocess.Popen[bytes]:
        env = PgTarget(server.dsn, SCHEMA).env(**ENV)
        with (tmp_path / f"worker-{len(started)}.log").open("wb") as log:
            argv = [TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry", *extra]
            proc = await asyncio.to_thread(
                subprocess.Popen, argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def answer(dsn: str, query: str) -> list[asyncpg.Record] | None:
    """The rows of ``query``, or None while the server does not answer."""
    try:
        conn = await asyncpg.connect(dsn, timeout=2)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        return await conn.fetch(query)
    finally:
        await conn.close()


async def counts(dsn: str) -> dict[str, int]:
    """Jobs per status, or {} while the server does not answer."""
    rows = await answer(dsn, f"SELECT status::text, count(*) FROM {SCHEMA}.jobs GROUP BY 1")
    return {row[0]: row[1] for row in rows or []}


async def until(check: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.1)


async def enqueue(dsn: str, count: int, seconds: float) -> None:
    backend = await PostgresBackend.connect(dsn, SCHEMA)
    try:
        await backend.enqueue_batch_fast(
            [EnqueueArgs("sleepy", {"seconds": seconds}) for _ in range(count)]
        )
    finally:
        await backend.close()


async def registered(dsn: str, workers: int) -> bool:
    rows = await answer(dsn, f"SELECT count(*) FROM {SCHEMA}.workers")
    return rows is not None and rows[0][0] >= workers


async def finished_some(dsn: str, at_least: int) -> bool:
    return (await counts(dsn)).get("succeeded", 0) >= at_least


def exited_log(tmp_path: Path) -> str:
    """The last lines each worker wrote: why one exited."""
    tails = [
        f"{log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        for log in sorted(tmp_path.glob("worker-*.log"))
    ]
    return "a worker exited\n" + "\n".join(tails)


async def test_a_standalone_worker_survives_two_restarts_and_an_outage_and_drains_everything(
    server: PrivateServer,
    workers: Callable[..., Awaitable[subprocess.Popen[bytes]]],
    tmp_path: Path,
) -> None:
    await enqueue(server.dsn, 1500, 0.02)
    first = await workers("--concurrency", "8")
    second = await workers("--concurrency", "8")
    # Both must be up before the first restart: a worker that cannot reach its database at
    # start exits 1 (the contract's "unreachable database"), a running one rides it out.
    await until(lambda: registered(server.dsn, 2), 60)
    await until(lambda: finished_some(server.dsn, 100), 60)
    server.restart("fast")
    await until(lambda: finished_some(server.dsn, 300), 60)
    server.restart("fast")
    await until(lambda: finished_some(server.dsn, 500), 60)
    server.stop("fast")
    outage_ends = time.monotonic() + 5
    while time.monotonic() < outage_ends:  # the outage itself: the workers must stay up
        assert first.poll() is None and second.poll() is None, exited_log(tmp_path)
        await asyncio.sleep(0.2)
    server.start()
    final = await until(lambda: _drained(server.dsn, 1500), 120)
    assert final == {"succeeded": 1500}
    assert first.poll() is None and second.poll() is None, exited_log(tmp_path)
    for proc in (first, second):
        proc.terminate()
        assert proc.wait(30) == 0


async def _drained(dsn: str, total: int) -> dict[str, int] | None:
    now = await counts(dsn)
    return now if now.get("succeeded", 0) == total else None


async def test_a_worker_started_during_no_outage_keeps_its_running_jobs_through_a_restart(
    server: PrivateServer, workers: Callable[..., Awaitable[subprocess.Popen[bytes]]]
) -> None:
    """A restart shorter than the lease does not interrupt running jobs: their successes
    wait for the database and are written when it is back, once each."""
    await enqueue(server.dsn, 8, 2.0)
    worker = await workers("--concurrency", "8")

    async def running() -> bool:
        return (await counts(server.dsn)).get("running", 0) == 8

    await until(running, 30)
    server.restart("fast")
    assert await until(lambda: _drained(server.dsn, 8), 60) == {"succeeded": 8}
    conn = await asyncpg.connect(server.dsn)
    try:
        stored = await conn.fetch(f"SELECT outcome, count(*) FROM {SCHEMA}.job_attempts GROUP BY 1")
        attempts = await conn.fetch(f"SELECT attempt, count(*) FROM {SCHEMA}.jobs GROUP BY 1")
    finally:
        await conn.close()
    # One body each, at the first attempt: no attempt ended otherwise (only those are rows;
    # a success's attempt is read from its job row).
    assert stored == [] and {row[0]: row[1] for row in attempts} == {1: 8}
    worker.terminate()
    assert worker.wait(30) == 0
