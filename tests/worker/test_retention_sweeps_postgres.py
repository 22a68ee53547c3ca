"""The leader's prune and archive expiry on a real PostgreSQL: run_once moves what the
settings say and deletes the archive at expire_at, and two leaders at once (a rolling
deploy) prune once: one runs, the other skips, every row moves once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol.retention import PrunePolicy, PruneResult
from taskq_core.statemachine import JobStatus
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.runtime import Worker
from taskq_core.worker.sweeps.archive_expiry import ArchiveExpirySweep
from taskq_core.worker.sweeps.prune import PruneSweep
from tests.conftest import PgTarget
from tests.worker.conftest import fast_settings

pytestmark = pytest.mark.postgres


@pytest.fixture
async def conn(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg.dsn)
    yield connection
    await connection.close()


@pytest.fixture
async def backends(pg: PgTarget) -> AsyncIterator[list[PostgresBackend]]:
    """Two backends on one schema, each its own pool: two workers' views of the database."""
    opened = [await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2) for _ in range(2)]
    yield opened
    for backend in opened:
        await backend.close()


def deps_on(backend: PostgresBackend, **settings: Any) -> WorkerDeps:
    return Worker(fast_settings(**settings), {}, backend=backend)._build_deps(backend)


async def add_jobs(
    conn: asyncpg.Connection, schema: str, status: str, finished_ago: timedelta, count: int = 1
) -> None:
    """``count`` jobs in ``status`` that finished ``finished_ago``, each with an attempt."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at)
                SELECT gen_random_uuid(), 'work', 'q_' || $1, $1::{schema}.job_status, 1,
                       clock_timestamp() - $2::interval
                FROM generate_series(1, $3::integer)
                RETURNING id, finished_at
            )
            INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
            SELECT id, 1, 'succeeded', finished_at FROM made""",
        status,
        finished_ago,
        count,
    )


async def live_and_archived(conn: asyncpg.Connection, schema: str) -> tuple[int, int, int]:
    """Jobs live, rows in the archive, distinct job ids in the archive."""
    record = await conn.fetchrow(
        f"""SELECT (SELECT count(*) FROM {schema}.jobs),
                   (SELECT count(*) FROM {schema}.jobs_archive),
                   (SELECT count(DISTINCT id) FROM {schema}.jobs_archive)"""
    )
    assert record is not None
    return record[0], record[1], record[2]


async def test_prune_then_archive_expiry_follow_the_settings(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    deps = deps_on(
        backends[0],
        prune_retention_succeeded="1d",
        archive_retention_period="7d",
        prune_batch_size=2,
    )
    await add_jobs(conn, pg.schema, "succeeded", timedelta(days=2), count=3)  # due
    await add_jobs(conn, pg.schema, "succeeded", timedelta(hours=1))  # too young
    await add_jobs(conn, pg.schema, "failed", timedelta(days=2))  # failed keeps 90 days
    result = await PruneSweep(deps).run_once()
    assert result is not None
    assert result.moved == {(JobStatus.SUCCEEDED, "q_succeeded"): 3}
    assert result.batches == 2  # 2 + 1
    assert await live_and_archived(conn, pg.schema) == (2, 3, 3)
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.job_attempts_archive") == 3
    kept = await conn.fetch(f"SELECT expire_at - archived_at FROM {pg.schema}.jobs_archive")
    assert {r[0] for r in kept} == {timedelta(days=7)}

    expiry = ArchiveExpirySweep(deps)
    assert await expiry.run_once() == 0  # nothing expired yet
    # Two jobs (and their attempts, which carry their expire_at) expired yesterday: their
    # day has ended, so the expiry removes them.
    await conn.execute(
        f"""WITH two AS (
                UPDATE {pg.schema}.jobs_archive SET expire_at = clock_timestamp() - interval '1d'
                WHERE id IN (SELECT id FROM {pg.schema}.jobs_archive LIMIT 2)
                RETURNING id, expire_at)
            UPDATE {pg.schema}.job_attempts_archive a SET expire_at = two.expire_at
            FROM two WHERE a.job_id = two.id"""
    )
    assert await expiry.run_once() == 2
    assert await live_and_archived(conn, pg.schema) == (2, 1, 1)
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.job_attempts_archive") == 1


class HeldOpen:
    """A backend whose prune, once done, waits for ``release`` before returning: its
    PruneSweep keeps the taskq:prune lock until then."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend
        self.pruned = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def prune_jobs(self, policy: PrunePolicy, **kwargs: Any) -> PruneResult:
        result = await self._backend.prune_jobs(policy, **kwargs)
        self.pruned.set()
        await self.release.wait()
        return result


async def test_two_leaders_prune_at_once_one_runs_the_other_skips(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await add_jobs(conn, pg.schema, "succeeded", timedelta(days=2), count=50)
    held = HeldOpen(backends[0])
    first = replace(
        deps_on(backends[0], prune_retention_succeeded="1d", prune_batch_size=7),
        backend=held,  # type: ignore[arg-type]
    )
    second = deps_on(backends[1], prune_retention_succeeded="1d", prune_batch_size=7)
    running = asyncio.create_task(PruneSweep(first).run_once())
    await asyncio.wait_for(held.pruned.wait(), 30)
    assert await PruneSweep(second).run_once() is None  # the other leader holds the lock
    held.release.set()
    result = await asyncio.wait_for(running, 30)
    assert result is not None and result.total == 50
    assert await live_and_archived(conn, pg.schema) == (0, 50, 50)
    again = await PruneSweep(second).run_once()  # released: the lock is free, nothing is left
    assert again is not None and again.total == 0


async def test_two_leaders_started_together_move_each_row_once(
    backends: list[PostgresBackend], conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await add_jobs(conn, pg.schema, "succeeded", timedelta(days=2), count=200)
    sweeps = [
        PruneSweep(deps_on(backend, prune_retention_succeeded="1d", prune_batch_size=10))
        for backend in backends
    ]
    results = await asyncio.gather(*(sweep.run_once() for sweep in sweeps))
    ran = [result for result in results if result is not None]
    assert sum(result.total for result in ran) == 200  # whichever ran, or both in turn
    assert await live_and_archived(conn, pg.schema) == (0, 200, 200)
