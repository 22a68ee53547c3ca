"""What one no-op job costs the database, phase by phase (``bench.py --section cost``).

A job's life in four phases on a fresh schema: the enqueue (one statement each, and one COPY
for all), the processing by a real ``taskq worker --until-idle`` (claim, start, settle), and
the prune that moves it to the archive. For each phase, per job: the WAL bytes written
(``pg_current_wal_lsn`` before and after, so it counts everything the server wrote meanwhile:
run it on a quiet server), the transactions committed, the rows inserted, updated (HOT
among them) and deleted in TaskQ's tables (``pg_stat_user_tables``, read after
``pg_stat_clear_snapshot`` once every session flushed its counts), and for the processing
the worker's CPU (its rusage once it exited). The figures guide cutting per-job work.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from benchmarks.worker_sections import worker_process
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus

STATS_FLUSH_WAIT = 11.0  # seconds: PGSTAT_IDLE_INTERVAL (10 s) and a margin
_JUST_ENDED = timedelta(microseconds=1)  # the prune's retention: every job that has ended


@dataclass(frozen=True)
class PhaseCost:
    """What one phase wrote, per job."""

    phase: str
    jobs: int
    wal_bytes: float
    commits: float
    inserted: float
    updated: float
    hot_updated: float
    deleted: float
    worker_cpu_us: float | None = None


@dataclass(frozen=True)
class _Reading:
    lsn: str
    commits: int
    rows: tuple[int, int, int, int]  # inserted, updated, HOT updated, deleted


async def _read(conn: asyncpg.Connection, schema: str) -> _Reading:
    # The statistics of this backend's own statements reach the views when it flushes them
    # (at most once a second, or at the end of a transaction when idle): force a fresh read.
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT pg_current_wal_lsn()::text AS lsn, "
        "(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS c, "
        "coalesce(sum(n_tup_ins), 0)::bigint AS i, coalesce(sum(n_tup_upd), 0)::bigint AS u, "
        "coalesce(sum(n_tup_hot_upd), 0)::bigint AS h, coalesce(sum(n_tup_del), 0)::bigint AS d "
        "FROM pg_stat_user_tables WHERE schemaname = $1",
        schema,
    )
    return _Reading(row["lsn"], row["c"], (row["i"], row["u"], row["h"], row["d"]))


async def _wal_between(conn: asyncpg.Connection, before: str, after: str) -> int:
    query = "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)"
    return int(await conn.fetchval(query, after, before))


async def _settled_stats() -> None:
    """Let the counts of the other sessions (the backend's pool, the worker) reach the views:
    an idle session flushes its statistics within PostgreSQL's idle interval (10 s)."""
    await asyncio.sleep(STATS_FLUSH_WAIT)


async def _phase(
    conn: asyncpg.Connection, schema: str, name: str, jobs: int, before: _Reading
) -> PhaseCost:
    await _settled_stats()
    after = await _read(conn, schema)
    wal = await _wal_between(conn, before.lsn, after.lsn)
    rows = [a - b for a, b in zip(after.rows, before.rows, strict=True)]
    return PhaseCost(
        name, jobs, wal / jobs, (after.commits - before.commits) / jobs,
        rows[0] / jobs, rows[1] / jobs, rows[2] / jobs, rows[3] / jobs,
    )  # fmt: skip


async def measure(backend: PostgresBackend, dsn: str, jobs: int) -> list[PhaseCost]:
    """The four phases on ``backend``'s fresh schema, ``jobs`` no-op jobs each."""
    schema = backend.schema
    conn = await asyncpg.connect(dsn)
    try:
        costs: list[PhaseCost] = []
        await _settled_stats()
        before = await _read(conn, schema)
        for n in range(jobs):
            await backend.enqueue(EnqueueArgs("noop", {"n": n}))
        costs.append(await _phase(conn, schema, "enqueue, one statement each", jobs, before))

        before = await _read(conn, schema)
        await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(jobs)])
        costs.append(await _phase(conn, schema, "enqueue, one COPY", jobs, before))

        before = await _read(conn, schema)
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        async with worker_process(
            dsn, schema, "--concurrency", "16", "--until-idle"
        ) as proc:  # fmt: skip
            await proc.wait()
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (
            cpu_before.ru_utime + cpu_before.ru_stime
        )
        processed = await _phase(
            conn, schema, "processing (claim, start, settle)", 2 * jobs, before
        )
        costs.append(_with_cpu(processed, cpu * 1e6 / (2 * jobs)))

        before = await _read(conn, schema)
        await backend.prune_jobs(
            PrunePolicy({JobStatus.SUCCEEDED: _JUST_ENDED}, archive_for=timedelta(days=1))
        )
        costs.append(await _phase(conn, schema, "prune to the archive", 2 * jobs, before))
        return costs
    finally:
        await conn.close()


def _with_cpu(cost: PhaseCost, cpu_us: float) -> PhaseCost:
    return PhaseCost(
        cost.phase, cost.jobs, cost.wal_bytes, cost.commits, cost.inserted, cost.updated,
        cost.hot_updated, cost.deleted, cpu_us,
    )  # fmt: skip
