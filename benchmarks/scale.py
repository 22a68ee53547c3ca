"""Scale benchmark: drain throughput with a huge backlog vs a small one, and worker memory.

    python benchmarks/scale.py [--big 1000000] [--small 10000] [--window 50000] [--repeat 3]

Starts a throwaway embedded PostgreSQL (or uses TASKQ_BENCH_DSN), loads ``--small`` jobs and
drains them with one `taskq worker` process (concurrency 16), ``--repeat`` times; then loads
``--big`` jobs and drains them all, reporting the rate over the first ``--window`` jobs (the
backlog is then at its largest) and over the whole drain, and the worker's RSS sampled every
second. Rates come from the jobs' own ``finished_at`` (the database clock), from the first
finish on, so neither the worker's start-up nor the measuring itself counts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from uuid import uuid4

import asyncpg
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.worker_sections import worker_process
from taskq_core import embedded
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.obs.logs import configure_logging


async def load(dsn: str, jobs: int) -> PostgresBackend:
    schema = f"scale_{uuid4().hex[:10]}"
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
    finally:
        await conn.close()
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


async def drain(dsn: str, jobs: int, window: int) -> dict[str, float]:
    """Drain ``jobs`` with one worker; rates from the jobs' own finish times (the DB clock).

    Nothing is counted while the worker runs: a count over a million rows would compete with
    it for the server (and more so the larger the backlog). Completion is polled with an
    index-only existence check; the rates come afterwards from ``finished_at``: the whole
    drain from the first to the last finish, the window from the first to the window-th.
    """
    backend = await load(dsn, jobs)
    rss: list[float] = []
    async with worker_process(dsn, backend.schema, "--concurrency", "16", "--until-idle") as proc:
        worker = psutil.Process(proc.pid)
        last_rss = 0.0
        while await backend.has_active_jobs(["default"]):
            now = time.perf_counter()
            if now - last_rss >= 1.0:
                last_rss = now
                try:
                    rss.append(worker.memory_info().rss / 2**20)
                except psutil.NoSuchProcess:
                    pass
            await asyncio.sleep(0.05)
        await proc.wait()
    conn = await asyncpg.connect(dsn)
    try:
        jobs_table = f"{backend.schema}.jobs"
        first, last = await conn.fetchrow(
            f"SELECT min(finished_at), max(finished_at) FROM {jobs_table}"
        )
        window_end = await conn.fetchval(
            f"SELECT finished_at FROM {jobs_table} WHERE finished_at IS NOT NULL"
            " ORDER BY finished_at OFFSET $1 LIMIT 1",
            min(window, jobs) - 1,
        )
        await conn.execute(f"DROP SCHEMA {backend.schema} CASCADE")
    finally:
        await conn.close()
    await backend.close()
    steady = rss[len(rss) // 10 :] or rss or [0.0]
    return {
        "jobs": jobs,
        "window_rate": (min(window, jobs) - 1) / max((window_end - first).total_seconds(), 1e-3),
        "rate": (jobs - 1) / max((last - first).total_seconds(), 1e-3),
        "rss_max": max(rss or [0.0]),
        "rss_min_steady": min(steady),
        "rss_max_steady": max(steady),
    }


async def main(options: argparse.Namespace, dsn: str) -> None:
    # The small drain lasts about a second, so it is the noisier figure: take the median of
    # a few (the big one is a single long drain).
    smalls = [await drain(dsn, options.small, options.small) for _ in range(options.repeat)]
    small = sorted(smalls, key=lambda result: result["rate"])[len(smalls) // 2]
    big = await drain(dsn, options.big, options.window)
    print(
        f"backlog {small['jobs']:>9,}: {small['rate']:8,.0f} jobs/s (median of "
        + ", ".join(f"{result['rate']:,.0f}" for result in smalls)
        + ")"
    )
    print(
        f"backlog {big['jobs']:>9,}: {big['window_rate']:8,.0f} jobs/s over the first "
        f"{options.window:,} ({big['window_rate'] / small['rate']:.0%} of the small backlog), "
        f"{big['rate']:,.0f} jobs/s over the whole drain"
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
    opts = parser.parse_args()
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
