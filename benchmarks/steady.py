"""The steady-state run of `make bench-scale`: enqueue and drain for minutes with the prune on.

One `taskq worker` process (concurrency 16) drains the ``default`` queue while the benchmark
keeps ``--backlog`` jobs waiting (so the worker never runs dry and the rate it reaches is its
capacity at that moment), and terminal jobs older than ``--retention`` move to the archive
once a minute, archived ones expiring after ``--archive-for``. What the run shows: the jobs
table stops growing once the prune keeps up, and the drain rate at the end is the rate at the
start.

The prune runs in one of two ways (``--prune-by``): ``worker``, the worker's own leader sweep
(TASKQ_PRUNE_CRON_EXPR='* * * * *' and TASKQ_ARCHIVE_EXPIRY_CRON_EXPR='* * * * *' with the
retention settings, what an operator would configure), or ``bench``, the benchmark calling
``prune_jobs(prune_policy(settings))`` and ``expire_archive`` once a minute itself, with the
same settings (for a build whose worker has no prune sweep).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from benchmarks.table_health import Snapshot, mib, sampling
from benchmarks.worker_sections import worker_process
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.retention import prune_policy
from taskq_core.settings import TaskqSettings

REFILL = 5_000  # jobs per enqueue of the producer


@dataclass(frozen=True)
class SteadyOptions:
    """How long, how deep and how short the retention of the steady-state run."""

    minutes: int
    backlog: int
    retention: timedelta
    archive_for: timedelta
    prune_by: str  # "worker" | "bench"


def _seconds(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"


def retention_env(options: SteadyOptions) -> dict[str, str]:
    """The settings of the prune and archive expiry, once a minute, as environment."""
    return {
        "TASKQ_PRUNE_CRON_EXPR": "* * * * *",
        "TASKQ_PRUNE_RETENTION_PERIOD": _seconds(options.retention),
        "TASKQ_ARCHIVE_EXPIRY_CRON_EXPR": "* * * * *",
        "TASKQ_ARCHIVE_RETENTION_PERIOD": _seconds(options.archive_for),
    }


async def _pending(conn: asyncpg.Connection, schema: str, cap: int) -> int:
    """Pending jobs, counted up to ``cap`` (an index-only walk of at most ``cap`` entries)."""
    count: int = await conn.fetchval(
        f"SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs WHERE status = 'pending'"
        " AND queue = 'default' LIMIT $1) p",
        cap,
    )
    return count


async def produce(backend: PostgresBackend, dsn: str, backlog: int, stop: asyncio.Event) -> None:
    """Keep about ``backlog`` jobs pending until ``stop``."""
    conn = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            missing = backlog - await _pending(conn, backend.schema, backlog)
            if missing >= REFILL:
                await backend.enqueue_batch_fast(
                    [EnqueueArgs("noop", {"n": n}) for n in range(REFILL)]
                )
            else:
                await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def prune_every_minute(
    backend: PostgresBackend, settings: TaskqSettings, stop: asyncio.Event
) -> list[str]:
    """The prune and archive expiry once a minute, as the leader's sweeps would run them."""
    done: list[str] = []
    policy = prune_policy(settings)
    while not stop.is_set():
        started = time.perf_counter()
        result = await backend.prune_jobs(policy)
        expired = await backend.expire_archive(settings.prune_batch_size)
        took = time.perf_counter() - started
        done.append(f"moved {result.total:,} in {result.batches} batches, expired {expired:,}")
        done[-1] += f" ({took:.1f} s)"
        try:
            await asyncio.wait_for(stop.wait(), max(60.0 - took, 1.0))
        except TimeoutError:
            pass
    return done


async def finished_per_minute(conn: asyncpg.Connection, schema: str, since: float) -> list[int]:
    """Jobs finished in each whole minute of the run, live and archived (expired ones
    counted from the archive expiry's own tally would blur the minutes: they are left out,
    so the run's archive retention is longer than it)."""
    rows = await conn.fetch(
        f"""SELECT floor(extract(epoch FROM finished_at) - $1) :: bigint / 60 AS minute,
                   count(*) AS jobs
            FROM (SELECT finished_at FROM {schema}.jobs WHERE finished_at IS NOT NULL
                  UNION ALL
                  SELECT finished_at FROM {schema}.jobs_archive) f
            GROUP BY 1 ORDER BY 1""",
        since,
    )
    return [row["jobs"] for row in rows if row["minute"] is not None and row["minute"] >= 0]


async def archived_per_minute(
    conn: asyncpg.Connection, schema: str, since: float
) -> dict[int, tuple[int, int]]:
    """Per minute of the run: jobs the prune archived, and in how many batches (each batch
    stamps its rows' archived_at once)."""
    rows = await conn.fetch(
        f"""SELECT floor(extract(epoch FROM archived_at) - $1) :: bigint / 60 AS minute,
                   count(*) AS jobs, count(DISTINCT archived_at) AS batches
            FROM {schema}.jobs_archive GROUP BY 1""",
        since,
    )
    return {row["minute"]: (row["jobs"], row["batches"]) for row in rows}


async def run(dsn: str, schema: str, options: SteadyOptions) -> None:
    """The steady-state run on ``schema`` (migrated, empty); prints one line a minute."""
    settings = TaskqSettings.load(
        pg_dsn=dsn,
        prune_retention_period=options.retention,
        archive_retention_period=options.archive_for,
    )
    backend = await PostgresBackend.connect(dsn, schema, max_size=4)
    conn = await asyncpg.connect(dsn)
    stop = asyncio.Event()
    extra_env = retention_env(options) if options.prune_by == "worker" else {}
    try:
        await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(REFILL)])
        since: float = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())")
        async with (
            sampling(dsn, schema, 60.0) as samples,
            worker_process(dsn, schema, "--concurrency", "16", extra_env=extra_env),
        ):
            producer = asyncio.create_task(produce(backend, dsn, options.backlog, stop))
            pruner = (
                asyncio.create_task(prune_every_minute(backend, settings, stop))
                if options.prune_by == "bench"
                else None
            )
            await asyncio.sleep(options.minutes * 60)
            stop.set()
            await producer
            prunes = await pruner if pruner is not None else []
        per_minute = await finished_per_minute(conn, schema, since)
        archived = await archived_per_minute(conn, schema, since)
    finally:
        await conn.close()
        await backend.close()
    report(options, samples, per_minute[: options.minutes], prunes, archived)


def report(
    options: SteadyOptions,
    samples: list[Snapshot],
    per_minute: list[int],
    prunes: list[str],
    archived: dict[int, tuple[int, int]],
) -> None:
    """The table a minute: the jobs table's size and dead tuples, and the drain rate."""
    print(
        f"steady state: {options.minutes} min, {options.backlog:,} jobs kept pending, "
        f"retention {_seconds(options.retention)}, archive for {_seconds(options.archive_for)}, "
        f"prune by the {options.prune_by}"
    )
    print(
        "  min  jobs total MiB  heap MiB  indexes MiB  live        dead        autovac  "
        "jobs/s  archived (batches) in the minute before"
    )
    for minute, sample in enumerate(samples[: len(per_minute) + 1]):
        jobs = sample.tables["jobs"]
        rate = f"{per_minute[minute - 1] / 60:,.0f}" if 0 < minute <= len(per_minute) else "-"
        print(
            f"  {minute:>3}  {mib(jobs.total_bytes):>13}  {mib(jobs.heap_bytes):>8}  "
            f"{mib(jobs.index_bytes):>11}  {jobs.live:>10,}  {jobs.dead:>10,}  "
            f"{jobs.autovacuums:>7}  {rate:>6}  {_archived(archived, minute - 1)}"
        )
    for n, line in enumerate(prunes, 1):
        print(f"  prune {n}: {line}")
    print(f"  archive at the end: {sum(jobs for jobs, _ in archived.values()):,} jobs")


def _archived(archived: dict[int, tuple[int, int]], minute: int) -> str:
    jobs, batches = archived.get(minute, (0, 0))
    return f"{jobs:,} ({batches})" if minute >= 0 else "-"
