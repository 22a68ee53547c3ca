"""What the scale benchmarks watch in the hot tables: sizes, dead tuples, autovacuum runs.

The same figures docs/operations.md tells an operator to watch, read from the statistics
views and the relation sizes (both cheap: no scan of a table).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg

HOT_TABLES = ("jobs", "job_attempts", "job_events")

_TABLES_SQL = """
SELECT c.relname AS table,
       pg_relation_size(c.oid) AS heap_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       pg_total_relation_size(c.oid) AS total_bytes,
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count,
       s.n_tup_hot_upd, s.n_tup_upd
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])
"""

_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text AS index, pg_relation_size(i.indexrelid) AS bytes
FROM pg_index i
WHERE i.indrelid = to_regclass(quote_ident($1) || '.jobs')
ORDER BY 2 DESC
"""


@dataclass(frozen=True)
class TableStats:
    """One table at one moment."""

    heap_bytes: int
    index_bytes: int
    total_bytes: int
    live: int
    dead: int
    autovacuums: int
    autoanalyzes: int
    hot_updates: int
    updates: int


@dataclass(frozen=True)
class Snapshot:
    """The hot tables (and the jobs table's indexes) at ``at`` seconds into a run."""

    at: float
    tables: dict[str, TableStats]
    jobs_indexes: dict[str, int] = field(default_factory=dict)


async def snapshot(conn: asyncpg.Connection, schema: str, at: float) -> Snapshot:
    """Read the statistics views and relation sizes of ``schema``'s hot tables."""
    rows = await conn.fetch(_TABLES_SQL, schema, list(HOT_TABLES))
    tables = {row["table"]: TableStats(*list(row)[1:]) for row in rows}
    indexes = {
        row["index"].rpartition(".")[2]: row["bytes"]
        for row in await conn.fetch(_INDEXES_SQL, schema)
    }
    return Snapshot(at, tables, indexes)


@asynccontextmanager
async def sampling(dsn: str, schema: str, every: float) -> AsyncIterator[list[Snapshot]]:
    """Snapshots of ``schema`` every ``every`` seconds while the block runs (and one at each
    end), on a connection of their own."""
    taken: list[Snapshot] = []
    conn = await asyncpg.connect(dsn)
    start = time.perf_counter()

    async def loop() -> None:
        while True:
            taken.append(await snapshot(conn, schema, time.perf_counter() - start))
            await asyncio.sleep(every)

    task = asyncio.create_task(loop())
    try:
        yield taken
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        taken.append(await snapshot(conn, schema, time.perf_counter() - start))
        await conn.close()


def mib(size: int) -> str:
    """A byte count in MiB for the tables printed."""
    return f"{size / 2**20:,.0f}"


def print_timeline(samples: list[Snapshot], title: str) -> None:
    """One line per snapshot: the jobs table's sizes, dead tuples and autovacuum runs."""
    print(title)
    print(
        "  t(s)  jobs heap MiB  jobs idx MiB  live        dead        autovac  "
        "attempts MiB  events MiB"
    )
    for s in samples:
        jobs = s.tables.get("jobs")
        if jobs is None:
            continue
        attempts = s.tables.get("job_attempts")
        events = s.tables.get("job_events")
        print(
            f"  {s.at:5.0f}  {mib(jobs.heap_bytes):>13}  {mib(jobs.index_bytes):>12}  "
            f"{jobs.live:>10,}  {jobs.dead:>10,}  {jobs.autovacuums:>7}  "
            f"{mib(attempts.total_bytes) if attempts else '-':>12}  "
            f"{mib(events.total_bytes) if events else '-':>10}"
        )
    if samples and samples[-1].jobs_indexes:
        sizes = ", ".join(f"{name} {mib(size)}" for name, size in samples[-1].jobs_indexes.items())
        print(f"  jobs indexes at the end (MiB): {sizes}")
