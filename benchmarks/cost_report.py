"""What one no-op job costs the database, phase by phase (``bench.py --section cost``).

A job's life in four phases on a fresh schema: the enqueue (one statement each, and one COPY
for all), the processing by a real ``taskq worker --until-idle`` (claim, start, settle), and
the prune that moves it to the archive; then the processing of an ephemeral actor's jobs
(``@actor(ephemeral=True)``: deleted at their success, nothing left to prune) and of one
batch's children (with a finalizer; its hook and finalizer counted with them). For each
phase, per job: the WAL bytes written (``pg_current_wal_lsn`` before and after, so it
counts everything the server wrote meanwhile: run it on a quiet server), the transactions
committed, the rows inserted, updated (HOT among them) and deleted in TaskQ's tables
(``pg_stat_user_tables``, read after ``pg_stat_clear_snapshot`` once every session flushed
its counts), and for the processing the worker's CPU (its rusage once it exited). The
figures guide cutting per-job work.

Where the server has ``pg_walinspect`` (PostgreSQL's contrib; the benchmark creates the
extension when it may), the processing phase's WAL is also broken down by relation and
record type (``wal_shares``): which table or index, and which kind of record (an insert, an
update, a row lock), each job's bytes went to.
"""

from __future__ import annotations

import asyncio
import re
import resource
from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta

import asyncpg

from benchmarks.worker_sections import worker_process
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.statemachine import JobStatus

STATS_FLUSH_WAIT = 11.0  # seconds: PGSTAT_IDLE_INTERVAL (10 s) and a margin
_JUST_ENDED = timedelta(microseconds=1)  # the prune's retention: every job that has ended


@dataclass(frozen=True)
class WalShare:
    """The WAL one kind of record on one relation wrote, per job."""

    relation: str  # a table or index of the schema, or "other"
    record: str  # resource manager / record type, e.g. Heap/UPDATE, Btree/INSERT_LEAF
    bytes: float
    records: float


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
    wal_shares: tuple[WalShare, ...] = ()  # its WAL by relation and record (processing)


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
    """The phases on ``backend``'s fresh schema, ``jobs`` no-op jobs each."""
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

        costs.append(await _processing(conn, dsn, schema, "", 2 * jobs))

        before = await _read(conn, schema)
        await backend.prune_jobs(
            PrunePolicy({JobStatus.SUCCEEDED: _JUST_ENDED}, archive_for=timedelta(days=1))
        )
        costs.append(await _phase(conn, schema, "prune to the archive", 2 * jobs, before))

        # An ephemeral actor's jobs (@actor(ephemeral=True)): deleted at their success.
        await backend.enqueue_batch_fast(
            [EnqueueArgs("noop_ephemeral", {"n": n}) for n in range(jobs)]
        )
        await _settled_stats()  # the enqueue's rows counted before the processing starts
        costs.append(await _processing(conn, dsn, schema, ", ephemeral actor", jobs))

        # One batch's children, with a finalizer: what a child costs beyond a plain job (as
        # many as the plain processing's, so the worker's start weighs alike per job).
        async with JobsClient(backend=backend) as client:
            await client.enqueue_batch(
                [("noop", {"n": n}) for n in range(2 * jobs)],
                finalizer=EnqueueItem("noop", {"final": True}),
            )
        await _settled_stats()
        costs.append(await _processing(conn, dsn, schema, ", batch children", 2 * jobs))
        return costs
    finally:
        await conn.close()


async def _processing(
    conn: asyncpg.Connection, dsn: str, schema: str, kind: str, jobs: int
) -> PhaseCost:
    """A real `taskq worker --until-idle` drains the ``jobs`` waiting: the phase's cost, the
    worker's CPU per job and the WAL by relation and record."""
    before = await _read(conn, schema)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    async with worker_process(dsn, schema, "--concurrency", "16", "--until-idle") as proc:
        await proc.wait()
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    name = f"processing{kind} (claim, start, settle)"
    processed = await _phase(conn, schema, name, jobs, before)
    after = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
    shares = await wal_shares(conn, schema, before.lsn, after, jobs)
    return replace(processed, worker_cpu_us=cpu * 1e6 / jobs, wal_shares=shares)


_BLOCK_RELATION = re.compile(r"rel \d+/\d+/(\d+)")


async def wal_shares(
    conn: asyncpg.Connection, schema: str, before: str, after: str, jobs: int
) -> tuple[WalShare, ...]:
    """The WAL between two positions by relation and record type, per job, largest first;
    empty when pg_walinspect is not there (or may not be created)."""
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        records = await conn.fetch(
            "SELECT resource_manager || '/' || record_type AS kind, record_length, block_ref "
            "FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)",
            before, after,
        )  # fmt: skip
    except asyncpg.PostgresError:
        return ()
    names = {
        row["relfilenode"]: row["relname"]
        for row in await conn.fetch(
            "SELECT c.relfilenode, c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
            schema,
        )
    }
    sizes: Counter[tuple[str, str]] = Counter()
    counts: Counter[tuple[str, str]] = Counter()
    for record in records:
        found = _BLOCK_RELATION.search(record["block_ref"] or "")
        relation = names.get(int(found.group(1)), "other") if found else "other"
        key = (relation, record["kind"])
        sizes[key] += record["record_length"]
        counts[key] += 1
    return tuple(
        WalShare(relation, kind, size / jobs, counts[(relation, kind)] / jobs)
        for (relation, kind), size in sizes.most_common()
    )
