"""Scale benchmark: drain throughput with a huge backlog vs a small one, worker memory, and
the steady state of the hot tables under continuous load with the prune on.

    python benchmarks/scale.py [--big 1000000] [--small 10000] [--window 50000] [--repeat 3]
                               [--trace] [--plain-tables] [--only drain|steady]
                               [--steady-minutes 6] [--retention 60] [--prune-by worker|bench]

Starts a throwaway embedded PostgreSQL (or uses TASKQ_BENCH_DSN), loads ``--small`` jobs and
drains them with one `taskq worker` process (concurrency 16), ``--repeat`` times; then loads
``--big`` jobs and drains them all, reporting the rate over the first ``--window`` jobs (the
backlog is then at its largest) and over the whole drain, and the worker's RSS sampled every
second. Rates come from the jobs' own ``finished_at`` (the database clock), from the first
finish on, so neither the worker's start-up nor the measuring itself counts. ``--trace``
prints the jobs table's sizes, dead tuples and autovacuum runs every 10 s of the big drain,
and the rate over each tenth of it.

Then the steady-state run (benchmarks/steady.py): enqueue and drain for ``--steady-minutes``
with the prune moving jobs finished more than ``--retention`` seconds ago once a minute.
``--plain-tables`` resets the hot tables' storage parameters (migration 0004) for either run,
to measure what they change.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import asyncpg
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import steady
from benchmarks.table_health import Snapshot, print_timeline, sampling
from benchmarks.worker_sections import worker_process
from taskq_core import embedded
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.obs.logs import configure_logging

# The storage parameters migrations give the hot tables (0004_table_health.sql);
# `--plain-tables` resets them, to measure what they change.
_TUNED = (
    "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_vacuum_threshold", "autovacuum_vacuum_cost_delay",
    "autovacuum_analyze_scale_factor",
)  # fmt: skip
TABLE_OPTIONS = {"jobs": _TUNED, "job_events": _TUNED, "job_attempts": _TUNED}

# Set by main(): reset the migration's storage parameters, and extra ones to try.
PLAIN_TABLES = False
EXTRA_OPTIONS: list[tuple[str, str]] = []


async def create_schema(dsn: str) -> str:
    """A fresh migrated schema, its storage parameters as the options ask."""
    schema = f"scale_{uuid4().hex[:10]}"
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
        if PLAIN_TABLES:
            for table, names in TABLE_OPTIONS.items():
                await conn.execute(f"ALTER TABLE {schema}.{table} RESET ({', '.join(names)})")
        for table, option in EXTRA_OPTIONS:
            await conn.execute(f"ALTER TABLE {schema}.{table} SET ({option})")
    finally:
        await conn.close()
    return schema


async def load(dsn: str, jobs: int) -> PostgresBackend:
    schema = await create_schema(dsn)
    backend = await PostgresBackend.connect(dsn, schema, max_size=4)
    for first in range(0, jobs, 50_000):
        count = min(50_000, jobs - first)
        await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(count)])
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"VACUUM ANALYZE {schema}.jobs")
    finally:
        await conn.close()
    return backend


async def window_plan(dsn: str, schema: str) -> str:
    """The buffers and time of dispatch's window read right now (the unkeyed head of
    jobs_fair_dispatch_idx, as dispatch_plain reads it; a SELECT, so it claims nothing)."""
    conn = await asyncpg.connect(dsn)
    try:
        lines = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)"
            f" SELECT j.id FROM {schema}.jobs j WHERE j.status = 'pending'"
            " AND j.queue = 'default' AND COALESCE(j.fairness_key, '__null__') = '__null__'"
            " AND j.fairness_key IS NULL AND j.scheduled_at <= clock_timestamp()"
            " ORDER BY j.priority DESC, j.scheduled_at, j.id LIMIT 128"
        )
    finally:
        await conn.close()
    text = [line[0].strip() for line in lines]
    keep = [t for t in text if t.startswith(("Buffers", "Execution", "Index Scan"))]
    return " | ".join(keep[:3] + keep[-1:])


async def segment_rates(conn: asyncpg.Connection, table: str, jobs: int) -> list[float]:
    """The drain rate over each tenth of the jobs, by finish time."""
    step = max(jobs // 10, 1)
    marks = await conn.fetch(
        f"SELECT finished_at FROM (SELECT finished_at, row_number() OVER (ORDER BY finished_at)"
        f" AS n FROM {table}) f WHERE n % $1 = 1 OR n = $2 ORDER BY n",
        step,
        jobs,
    )
    times = [m["finished_at"] for m in marks]
    return [step / max((b - a).total_seconds(), 1e-3) for a, b in itertools.pairwise(times)]


async def drain(dsn: str, jobs: int, window: int, trace: bool = False) -> dict[str, float]:
    """Drain ``jobs`` with one worker; rates from the jobs' own finish times (the DB clock).

    Nothing is counted while the worker runs: a count over a million rows would compete with
    it for the server (and more so the larger the backlog). Completion is polled with an
    index-only existence check; the rates come afterwards from ``finished_at``: the whole
    drain from the first to the last finish, the window from the first to the window-th.
    """
    backend = await load(dsn, jobs)
    rss: list[float] = []
    plans: list[str] = []
    async with (
        sampling(dsn, backend.schema, 10.0 if trace else 1e9) as samples,
        worker_process(dsn, backend.schema, "--concurrency", "16", "--until-idle") as proc,
    ):
        worker = psutil.Process(proc.pid)
        last_rss = last_plan = time.perf_counter()
        while await backend.has_active_jobs(["default"]):
            now = time.perf_counter()
            if now - last_rss >= 1.0:
                last_rss = now
                try:
                    rss.append(worker.memory_info().rss / 2**20)
                except psutil.NoSuchProcess:
                    pass
            if trace and now - last_plan >= 60.0:
                last_plan = now
                plans.append(await window_plan(dsn, backend.schema))
            await asyncio.sleep(0.05)
        await proc.wait()
    conn = await asyncpg.connect(dsn)
    try:
        jobs_table = f"{backend.schema}.jobs"
        span = await conn.fetchrow(f"SELECT min(finished_at), max(finished_at) FROM {jobs_table}")
        assert span is not None
        first, last = span
        window_end = await conn.fetchval(
            f"SELECT finished_at FROM {jobs_table} WHERE finished_at IS NOT NULL"
            " ORDER BY finished_at OFFSET $1 LIMIT 1",
            min(window, jobs) - 1,
        )
        segments = await segment_rates(conn, jobs_table, jobs) if trace else []
        await conn.execute(f"DROP SCHEMA {backend.schema} CASCADE")
    finally:
        await conn.close()
    await backend.close()
    steady = rss[len(rss) // 10 :] or rss or [0.0]
    if trace:
        report_trace(samples, plans, segments)
    return {
        "jobs": jobs,
        "window_rate": (min(window, jobs) - 1) / max((window_end - first).total_seconds(), 1e-3),
        "rate": (jobs - 1) / max((last - first).total_seconds(), 1e-3),
        "rss_max": max(rss or [0.0]),
        "rss_min_steady": min(steady),
        "rss_max_steady": max(steady),
    }


def report_trace(samples: list[Snapshot], plans: list[str], segments: list[float]) -> None:
    """The big drain's table health over time, its window plans and its rate per tenth."""
    print_timeline(samples, "big drain, every 10 s:")
    for n, plan in enumerate(plans, 1):
        print(f"  window read at {n} min: {plan}")
    print("  rate per tenth of the jobs: " + ", ".join(f"{r:,.0f}" for r in segments))


async def main(options: argparse.Namespace, dsn: str) -> None:
    if options.only in (None, "drain"):
        await drains(options, dsn)
    if options.only in (None, "steady"):
        schema = await create_schema(dsn)
        await steady.run(
            dsn,
            schema,
            steady.SteadyOptions(
                minutes=options.steady_minutes,
                backlog=options.steady_backlog,
                retention=timedelta(seconds=options.retention),
                archive_for=timedelta(seconds=options.archive_for),
                prune_by=options.prune_by,
            ),
        )
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        finally:
            await conn.close()


async def drains(options: argparse.Namespace, dsn: str) -> None:
    # The small drain lasts about a second, so it is the noisier figure: take the median of
    # a few (the big one is a single long drain).
    smalls = [await drain(dsn, options.small, options.small) for _ in range(options.repeat)]
    big = await drain(dsn, options.big, options.window, options.trace)
    print(
        f"backlog {big['jobs']:>9,}: {big['window_rate']:8,.0f} jobs/s over the first "
        f"{options.window:,}, {big['rate']:,.0f} jobs/s over the whole drain"
    )
    if smalls:
        small = sorted(smalls, key=lambda result: result["rate"])[len(smalls) // 2]
        print(
            f"backlog {small['jobs']:>9,}: {small['rate']:8,.0f} jobs/s (median of "
            + ", ".join(f"{result['rate']:,.0f}" for result in smalls)
            + f"); the big drain's first {options.window:,}: "
            f"{big['window_rate'] / small['rate']:.0%} of it, the whole big drain: "
            f"{big['rate'] / small['rate']:.0%}"
        )
    print(
        f"worker RSS: max {big['rss_max']:.0f} MiB; after warm-up "
        f"{big['rss_min_steady']:.0f}-{big['rss_max_steady']:.0f} MiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="small drains (median)")
    parser.add_argument(
        "--trace", action="store_true",
        help="print the big drain's table sizes, dead tuples and autovacuum runs every 10 s",
    )  # fmt: skip
    parser.add_argument(
        "--plain-tables", action="store_true",
        help="reset the hot tables' storage parameters (0004_table_health.sql) to the defaults",
    )  # fmt: skip
    parser.add_argument(
        "--table-option", action="append", default=[], metavar="TABLE:NAME=VALUE",
        help="set one more storage parameter on a table, to try it (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--only", choices=("drain", "steady"),
        help="run only the drains (small and big backlog) or only the steady-state run",
    )  # fmt: skip
    parser.add_argument("--steady-minutes", type=int, default=6)
    parser.add_argument(
        "--steady-backlog", type=int, default=20_000, help="jobs kept pending (steady state)"
    )
    parser.add_argument(
        "--retention", type=int, default=60, help="seconds a finished job stays (steady state)"
    )
    parser.add_argument(
        "--archive-for", type=int, default=3600, help="seconds an archived job stays"
    )
    parser.add_argument(
        "--prune-by", choices=("worker", "bench"), default="worker",
        help="the worker's leader sweep runs the prune (its settings), or the benchmark does",
    )  # fmt: skip
    opts = parser.parse_args()
    PLAIN_TABLES = opts.plain_tables
    EXTRA_OPTIONS.extend(tuple(o.split(":", 1)) for o in opts.table_option)  # type: ignore[misc]
    configure_logging(level="WARNING")
    given = os.environ.get("TASKQ_BENCH_DSN")
    root = None if given else Path(tempfile.mkdtemp(prefix="taskq-scale-"))
    try:
        target = given or embedded.ensure_server(root / "pgdata")  # type: ignore[operator]
        asyncio.run(main(opts, target))
    finally:
        if root is not None:
            embedded.stop(root / "pgdata")
            shutil.rmtree(root, ignore_errors=True)
