"""Standalone workers live through fast PostgreSQL restarts while their bodies fail and succeed.

A fast restart (``pg_ctl restart -m fast``) sends every session FATAL 57P01; a pooled
connection that got it while idle fails its next ``BEGIN`` with asyncpg's InternalClientError
("another operation is in progress"), which once escaped the failure write and ended both
workers with exit 1 at the first restart. Two `taskq worker --concurrency 16` processes on a
server of the test's own (never the shared one) must keep running through several restarts,
bring every job to the status its actor decides, and leave no unretrieved task exception in
their logs. And a leader whose lock connection died in an outage must not report the
database back before it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

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
FAILING, SUCCEEDING, RESTARTS = 200, 100, 4
TERMINAL = {"succeeded", "failed", "cancelled", "crashed", "abandoned"}


class Worker:
    """A standalone `taskq worker` and its log file."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def running(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> list[str]:
        """The log's event names so far, in order."""
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
def workers(server: PrivateServer, tmp_path: Path) -> Iterator[list[Worker]]:
    env = PgTarget(server.dsn, PRIVATE_SCHEMA).env(**BASE_ENV)
    argv = [TASKQ_BIN, "worker", "--actors", "tests.e2e.restart_actors:registry"]
    started: list[Worker] = []
    for n in (1, 2):
        log = tmp_path / f"worker-{n}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [*argv, "--concurrency", "16"], cwd=ROOT, env=env, stdout=sink, stderr=sink
            )
        started.append(Worker(proc, log))
    yield started
    for worker in started:
        if worker.running():
            worker.proc.kill()
        worker.proc.wait()


async def fetch(dsn: str, query: str) -> list[asyncpg.Record] | None:
    """Rows of ``query`` on the test's schema, or None while the server does not answer."""
    try:
        conn = await asyncpg.connect(dsn, timeout=2)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        return list(await conn.fetch(query.replace("{s}", PRIVATE_SCHEMA)))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return None
    finally:
        conn.terminate()


async def bodies_by_worker(dsn: str) -> dict[UUID, int]:
    """How many attempts each worker has ended: its attempt rows, and its successes (a
    success's attempt is read from the job row, not stored)."""
    rows = await fetch(
        dsn,
        "SELECT worker_id, count(*) FROM {s}.job_attempts GROUP BY 1 UNION ALL "
        "SELECT locked_by_worker, count(*) FROM {s}.jobs WHERE status = 'succeeded' GROUP BY 1",
    )
    counts: dict[UUID, int] = {}
    for row in rows or ():
        counts[row[0]] = counts.get(row[0], 0) + row[1]
    return counts


async def until(
    check: Callable[[], Awaitable[Any]], workers: list[Worker], timeout: float = 90
) -> Any:
    """Poll ``check`` until it is truthy; fail at once if a worker exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        dead = [w.describe() for w in workers if not w.running()]
        assert not dead, f"a standalone worker exited: {dead}"
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{check.__name__}: not met within {timeout}s"
        await asyncio.sleep(0.1)


async def test_standalone_workers_survive_fast_restarts_under_failing_and_succeeding_bodies(
    server: PrivateServer, workers: list[Worker]
) -> None:
    rng = random.Random(32)
    backend = await PostgresBackend.connect(server.dsn, PRIVATE_SCHEMA)
    try:
        await backend.enqueue_batch_fast(
            [EnqueueArgs("always_fails", {"ms": rng.randint(10, 100)}) for _ in range(FAILING)]
            + [EnqueueArgs("succeeds", {"ms": rng.randint(10, 100)}) for _ in range(SUCCEEDING)]
        )
    finally:
        await backend.close()
    for _ in range(RESTARTS):
        # Restart only once both workers have run more bodies since the last restart: each
        # restart then lands among their writes, and each one proves they came back.
        seen = await bodies_by_worker(server.dsn)

        async def both_progressed(seen: dict[UUID, int] = seen) -> bool:
            now = await bodies_by_worker(server.dsn)
            grown = [w for w, n in now.items() if n >= seen.get(w, 0) + 8]
            return len(grown) >= 2

        await until(both_progressed, workers)
        await asyncio.to_thread(server.restart, "fast")

    async def all_terminal() -> dict[tuple[str, str], int] | None:
        rows = await fetch(
            server.dsn, "SELECT actor, status::text, count(*) FROM {s}.jobs GROUP BY 1, 2"
        )
        counts = {(row[0], row[1]): row[2] for row in rows or ()}
        done = {status for _, status in counts} <= TERMINAL
        return counts if done and sum(counts.values()) == FAILING + SUCCEEDING else None

    counts = await until(all_terminal, workers)
    assert counts == {("always_fails", "failed"): FAILING, ("succeeds", "succeeded"): SUCCEEDING}
    for worker in workers:
        worker.proc.terminate()
    for worker in workers:
        assert await asyncio.to_thread(worker.proc.wait, 30) == 0, worker.describe()
        log = worker.log.read_text(errors="replace")
        assert "Task exception was never retrieved" not in log, worker.describe()


async def test_an_outage_is_one_unavailable_then_one_available_even_for_the_leader(
    server: PrivateServer, workers: list[Worker]
) -> None:
    """A leader whose lock connection died in the outage has lost leadership, and the
    database is still away: its campaign must not report the database back (that once logged
    ``database_available`` between two ``database_unavailable``, long before the server was)."""

    async def a_leader() -> Worker | None:  # once both run (a start in an outage exits 1)
        if not all("worker_started" in w.events() for w in workers):
            return None
        return next((w for w in workers if "leader_elected" in w.events()), None)

    leader = await until(a_leader, workers)
    await asyncio.to_thread(server.stop, "fast")

    async def stepped_down() -> bool:  # its first campaign in the outage has ended
        return "leader_lost" in leader.events()

    await until(stepped_down, workers)
    await asyncio.to_thread(server.start)

    async def back() -> bool:
        return "database_available" in leader.events()

    await until(back, workers)
    outage = [e for e in leader.events() if e in ("database_unavailable", "database_available")]
    assert outage == ["database_unavailable", "database_available"], leader.describe()
