"""Cron benchmark: what the leader's cron tick costs with 10,000 schedules (``make bench``).

On a scratch schema (TASKQ_BENCH_DSN, else a throwaway embedded PostgreSQL) it declares
``--schedules`` daily schedules the way a worker start does (one upsert), then times the
leader's ``fire_due_schedules`` tick: with nothing due (what the leader pays every second),
and with ``--due`` schedules due (one job each). It prints the median and slowest of each,
and the pick's EXPLAIN ANALYZE, which must walk schedules_due_idx and read the due rows only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg

from taskq_core import embedded
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import ScheduleSpec
from taskq_core.cron_timing import Schedule
from taskq_core.obs.logs import configure_logging


def _specs(count: int) -> list[ScheduleSpec]:
    """``count`` daily schedules spread over the day's minutes."""
    return [
        ScheduleSpec(
            name=f"bench-{n:05d}",
            actor="noop",
            cron=f"{n % 60} {n // 60 % 24} * * *",
            payload={"n": n},
        )
        for n in range(count)
    ]


async def _make_due(conn: asyncpg.Connection, schema: str, due: int) -> None:
    """Plan the first ``due`` schedules at their latest fire time: due now."""
    now = await conn.fetchval("SELECT clock_timestamp()")
    rows = await conn.fetch(
        f"SELECT id, cron, timezone FROM {schema}.schedules ORDER BY name LIMIT $1", due
    )
    fires = [Schedule(r["cron"], r["timezone"]).latest_fire(now) for r in rows]
    await conn.execute(
        f"""UPDATE {schema}.schedules s SET next_fire_at = d.fire_at
            FROM unnest($1::uuid[], $2::timestamptz[]) AS d(id, fire_at) WHERE s.id = d.id""",
        [r["id"] for r in rows],
        fires,
    )
    # A re-run's fire times would meet their jobs' unique keys: start each round without them.
    await conn.execute(f"DELETE FROM {schema}.jobs")


def _milliseconds(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1000:7.2f} ms   max {max(times) * 1000:7.2f} ms"


def _plan_lines(plan: dict[str, Any], depth: int = 0) -> list[str]:
    line = "  " * depth + plan["Node Type"]
    if "Index Name" in plan:
        line += f" using {plan['Index Name']}"
    if "Index Cond" in plan:
        line += f" ({plan['Index Cond']})"
    line += f"  rows={plan.get('Actual Rows')}"
    lines = [line]
    for child in plan.get("Plans", []):
        lines += _plan_lines(child, depth + 1)
    return lines


async def run(dsn: str, count: int, due: int, runs: int) -> None:
    schema = f"bench_{uuid4().hex[:12]}"
    conn = await asyncpg.connect(dsn)
    await migrate_up(conn, schema)
    backend = await PostgresBackend.connect(dsn, schema)
    try:
        started = time.perf_counter()
        await backend.sync_code_schedules(_specs(count))
        print(
            f"worker start's upsert of {count:,} schedules: {time.perf_counter() - started:.2f} s"
        )
        await conn.execute(f"VACUUM ANALYZE {schema}.schedules")

        idle = []
        for _ in range(runs):
            started = time.perf_counter()
            assert await backend.fire_due_schedules(100) == []
            idle.append(time.perf_counter() - started)
        print(f"tick, nothing due among {count:,}:      {_milliseconds(idle)}")

        busy = []
        for _ in range(max(runs // 10, 5)):
            await _make_due(conn, schema, due)
            started = time.perf_counter()
            fired = await backend.fire_due_schedules(due)
            busy.append(time.perf_counter() - started)
            assert sum(f.job_id is not None for f in fired) == due
        print(f"tick, {due} due among {count:,} ({due} jobs): {_milliseconds(busy)}")
        per = statistics.median(busy) / due * 1000
        print(f"  per fired schedule: {per:.3f} ms")

        await _make_due(conn, schema, due)
        explained = conn.transaction()  # EXPLAIN ANALYZE locks the rows: roll that back
        await explained.start()
        try:
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + render("fire_due_pick", schema), due
            )
        finally:
            await explained.rollback()
        print("the pick (EXPLAIN ANALYZE):")
        for line in _plan_lines(json.loads(raw)[0]["Plan"]):
            print("  " + line)
    finally:
        await backend.close()
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--schedules", type=int, default=10_000, help="how many (10,000)")
    parser.add_argument("--due", type=int, default=100, help="how many are due (100)")
    parser.add_argument("--runs", type=int, default=200, help="idle ticks timed (200)")
    options = parser.parse_args(argv)
    configure_logging(level="WARNING")
    given = os.environ.get("TASKQ_BENCH_DSN")
    root = None if given else Path(tempfile.mkdtemp(prefix="taskq-bench-"))
    try:
        dsn = embedded.ensure_server(root / "pgdata") if root is not None else str(given)
        print(f"cron tick benchmark ({'TASKQ_BENCH_DSN' if given else 'embedded PostgreSQL'})")
        asyncio.run(run(dsn, options.schedules, options.due, options.runs))
    finally:
        if root is not None:
            embedded.stop(root / "pgdata")
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
