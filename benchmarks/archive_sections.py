"""The archive expiry, by partition against row by row: N archived jobs (one attempt each)
of an ended day removed by ``expire_archive``, once from a partition (dropped whole) and once
from the default partition (deleted in batches, as every archived job was before the
archive was partitioned), with the time and the WAL each takes.

    python -m benchmarks.archive_sections --jobs 10000000 --dsn postgresql://...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date

import asyncpg

from taskq_core.backend.postgres import archive_partitions
from taskq_core.backend.postgres.backend import PostgresBackend

BATCH = 10_000  # TASKQ_PRUNE_BATCH_SIZE's default


@dataclass(frozen=True)
class ExpiryFigure:
    """One way of removing ``jobs`` archived jobs: seconds and WAL bytes."""

    way: str
    jobs: int
    seconds: float
    wal_bytes: int


async def _fill(conn: asyncpg.Connection, schema: str, day: date, jobs: int) -> None:
    """``jobs`` archived no-op jobs expiring at noon UTC of ``day``, an attempt each, and
    their count, as the prune leaves them."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs_archive (id, actor, queue, status, payload, attempt,
                    claimed_at, started_at, finished_at, archived_at, expire_at)
                SELECT gen_random_uuid(), 'noop', 'default', 'failed', '{{"n": 1}}', 1,
                       now(), now(), now(), now(), $1::date + interval '12 hours'
                FROM generate_series(1, $2)
                RETURNING id, expire_at)
            INSERT INTO {schema}.job_attempts_archive (job_id, attempt, outcome, expire_at)
            SELECT id, 1, 'failed', expire_at FROM made""",
        day,
        jobs,
    )
    # The count the prune would have kept (no row when the jobs went to the default).
    await conn.execute(
        f"UPDATE {schema}.archive_partitions SET jobs = $2 WHERE starts = $1", day, jobs
    )
    await conn.execute(f"VACUUM ANALYZE {schema}.jobs_archive")
    await conn.execute(f"VACUUM ANALYZE {schema}.job_attempts_archive")
    await conn.execute("CHECKPOINT")


async def _expire(conn: asyncpg.Connection, backend: PostgresBackend, way: str) -> ExpiryFigure:
    lsn = await conn.fetchval("SELECT pg_current_wal_lsn()")
    started = time.perf_counter()
    removed = await backend.expire_archive(BATCH)
    seconds = time.perf_counter() - started
    wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", lsn)
    return ExpiryFigure(way, removed, seconds, int(wal))


async def measure(
    fresh_backend: Callable[[], AbstractAsyncContextManager[PostgresBackend]],
    dsn: str,
    jobs: int,
) -> list[ExpiryFigure]:
    """Both ways on fresh schemas: a day partition dropped, the default's rows deleted."""
    figures = []
    for dropped in (True, False):
        way = "a day partition dropped" if dropped else f"default partition, batches of {BATCH:,}"
        async with fresh_backend() as backend:
            conn = await asyncpg.connect(dsn)
            try:
                yesterday: date = await conn.fetchval(
                    "SELECT ((clock_timestamp() AT TIME ZONE 'UTC') - interval '1 day')::date"
                )
                if dropped:
                    pool, queries = backend._pool, backend._queries
                    await archive_partitions.make_range(pool, queries, yesterday, 1)
                await _fill(conn, backend.schema, yesterday, jobs)
                figures.append(await _expire(conn, backend, way))
            finally:
                await conn.close()
    return figures


def describe(figures: list[ExpiryFigure]) -> list[str]:
    return [
        f"archive expiry, {f.way}: {f.jobs:,} jobs in {f.seconds * 1000:,.0f} ms, "
        f"{f.wal_bytes / max(f.jobs, 1):,.1f} WAL bytes per job"
        for f in figures
    ]


async def _main() -> None:
    parser = argparse.ArgumentParser(description="The archive expiry, by day and row by row.")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dsn", default=os.environ.get("TASKQ_BENCH_DSN"), required=False)
    args = parser.parse_args()
    if not args.dsn:
        parser.error("--dsn or TASKQ_BENCH_DSN is required (make bench runs this section too)")
    from benchmarks.bench import Bench

    bench = Bench(args.dsn, quick=False, concurrency=16)
    for line in describe(await measure(bench.fresh_backend, args.dsn, args.jobs)):
        print(line)


if __name__ == "__main__":
    asyncio.run(_main())
