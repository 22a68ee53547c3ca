"""A worker follows a primary failover through a multi-host DSN.

A primary and its streaming standby of this test's own (never the shared server); a real
``taskq worker`` with ``postgresql://P1,P2/db?target_session_attrs=read-write``. Mid-drain the
primary is stopped as a crash and the standby promoted: the worker reconnects to the new
primary on its own and finishes the drain there, with no job lost. Jobs in flight may run
again (at least once); their effect rows, written in the transaction of each success, exist
exactly once per job. The test prints the time from promotion to the first job settled
(docs/reliability.md, Failover).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chaos.replication import ReplicatedPair
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import EnqueueArgs
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.failover_actors import EFFECTS_TABLE
from tests.e2e.test_resilience import BASE_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "taskq"
JOBS = 400
FAIL_OVER_AFTER = 100  # jobs succeeded on the first primary


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    """Primary and standby in a directory outside pytest's tmp_path (private to root, which
    the servers' user cannot cross)."""
    servers = ReplicatedPair(Path(tempfile.mkdtemp(prefix="taskq-failover-")))
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


async def _prepare(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, SCHEMA)
        await conn.execute(
            f"CREATE TABLE {EFFECTS_TABLE} (job_id uuid NOT NULL, attempt int NOT NULL)"
        )
    finally:
        await conn.close()
    backend = await PostgresBackend.connect(dsn, SCHEMA)
    try:
        await backend.enqueue_batch_fast([EnqueueArgs("effect", {}) for _ in range(JOBS)])
    finally:
        await backend.close()


async def _fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record] | None:
    """The rows, or None while that server does not answer."""
    try:
        conn = await asyncpg.connect(dsn, timeout=2)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def _succeeded(dsn: str) -> int:
    rows = await _fetch(dsn, f"SELECT count(*) FROM {SCHEMA}.jobs WHERE status = 'succeeded'")
    return 0 if rows is None else int(rows[0][0])


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("promote_after", [0.0, 5.0], ids=["promoted-at-once", "promoted-after-5s"])
async def test_a_worker_follows_a_promotion_and_loses_no_job(
    pair: ReplicatedPair, tmp_path: Path, promote_after: float
) -> None:
    await _prepare(pair.primary_dsn)
    await pair.wait_replayed()  # every job is on the standby before anything can fail
    env = PgTarget(pair.multi_host_dsn, SCHEMA).env(**BASE_ENV)
    log_path = tmp_path / "worker.log"
    argv = [TASKQ_BIN, "worker", "--actors", "tests.e2e.failover_actors:registry",
            "--concurrency", "8"]  # fmt: skip
    with log_path.open("wb") as log:
        worker = await asyncio.to_thread(
            subprocess.Popen, argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        await _until(
            lambda: _ran(pair.primary_dsn, FAIL_OVER_AFTER), 60, "the first primary's jobs"
        )
        await asyncio.to_thread(pair.stop_primary, "immediate")
        # No primary at all for a while, as while a failover manager decides: the worker
        # must stay up, retrying.
        no_primary_until = time.monotonic() + promote_after
        while time.monotonic() < no_primary_until:
            assert worker.poll() is None, "the worker exited while there was no primary"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(pair.promote_standby)
        rows = await _fetch(pair.standby_dsn, "SELECT clock_timestamp()")
        assert rows is not None
        promoted_at: datetime = rows[0][0]
        await _until(
            lambda: _drained_or_exited(pair.standby_dsn, worker), 50, "the new primary's drain"
        )
        assert worker.poll() is None, log_path.read_text()[-3000:]  # exited mid-failover
        worker.terminate()
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    new_primary = pair.standby_dsn
    statuses = await _fetch(
        new_primary, f"SELECT status::text, count(*) FROM {SCHEMA}.jobs GROUP BY 1"
    )
    assert statuses is not None
    assert {r[0]: r[1] for r in statuses} == {"succeeded": JOBS}, log_path.read_text()[-3000:]
    effects = await _fetch(
        new_primary,
        f"SELECT count(*) AS effects, count(DISTINCT e.job_id) AS jobs FROM {EFFECTS_TABLE} e "
        f"JOIN {SCHEMA}.jobs j ON j.id = e.job_id",
    )
    assert effects is not None and (effects[0]["effects"], effects[0]["jobs"]) == (JOBS, JOBS)

    first = await _fetch(
        new_primary,
        f"SELECT min(finished_at) - $1::timestamptz AS after, "
        f"count(*) FILTER (WHERE attempt > 1) AS again FROM {SCHEMA}.jobs "
        f"WHERE finished_at > $1::timestamptz",
        promoted_at,
    )
    assert first is not None and first[0]["after"] is not None
    after, again = first[0]["after"].total_seconds(), first[0]["again"]
    print(
        f"\nfailover ({promote_after:g}s without a primary): first job settled {after:.2f}s "
        f"after the promotion; {again} jobs finished after it on a later attempt"
    )


async def _ran(dsn: str, at_least: int) -> bool:
    return await _succeeded(dsn) >= at_least


async def _drained_or_exited(dsn: str, worker: subprocess.Popen[bytes]) -> bool:
    """Every job succeeded there, or the worker is gone (the assertion after says which)."""
    return worker.poll() is not None or await _ran(dsn, JOBS)
