"""The archive in time partitions: ``jobs_archive`` and ``job_attempts_archive`` are
partitioned by range of ``expire_at``, each range a few UTC days (migration 0021,
sql/retention.sql "The archive in time partitions"). The prune makes a range's two
partitions ahead of the days its jobs will expire on; the expiry drops them whole once the
range has ended, instead of deleting its rows one by one (no per-row WAL, no dead tuples,
no vacuum). The registry ``archive_partitions`` holds each range and its count of jobs.

A range spans ``archive_partition_days(archive_for)`` days, so about thirty partitions hold
an archive whatever its retention: a read of the archive by id visits, and locks, each one
(with a year's retention in daily partitions, a read of attempts would take 1,400 locks of
the server's shared lock table). Ranges of one width tile the calendar; a range that would
overlap one made with another width (the retention setting changed) is clipped to fit.

Partition DDL takes no bound parameters: the statements are built here from the validated
schema name and ``date`` values (digits only), never from text a user typed. Each change
runs in a transaction with a lock timeout, so a long read of the archive makes it give up
(the next pass tries again) rather than queue every other reader of the archive behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, timedelta

import asyncpg
import structlog
from asyncpg.pool import Pool, PoolConnectionProxy

from taskq_core.backend.protocol.retention import archive_partition_days, archive_range
from taskq_core.constants import validate_identifier

from .queries import SchemaQueries

ARCHIVE_TABLES = ("jobs_archive", "job_attempts_archive")
# How long a partition change waits for the archive's locks before it gives up for this pass.
LOCK_TIMEOUT = "5s"

Range = tuple[date, date]  # [starts, ends) in UTC days

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")


def partition_name(table: str, starts: date) -> str:
    """The partition of ``table`` whose range begins on ``starts``."""
    return f"{table}_{starts:%Y%m%d}"


def covering(day: date, ranges: Sequence[Range]) -> Range | None:
    """The range of ``ranges`` holding ``day``, if any."""
    return next(((s, e) for s, e in ranges if s <= day < e), None)


def range_to_make(day: date, width: int, ranges: Sequence[Range]) -> Range:
    """The range to make for ``day`` (which no range of ``ranges`` holds): the aligned one
    of ``width`` days, clipped so it overlaps none of ``ranges``."""
    starts, ends = archive_range(day, width)
    for s, e in ranges:
        if e <= day:
            starts = max(starts, e)
        elif s > day:
            ends = min(ends, s)
    return starts, ends


def _bound(day: date) -> str:
    """Midnight UTC at the start of ``day``, as a literal (a ``date`` prints digits only)."""
    return f"'{day.isoformat()} 00:00:00+00'"


def create_statements(schema: str, table: str, span: Range) -> tuple[str, str, str]:
    """The statements that give ``table`` its partition of ``span``: made detached, filled
    with the rows the default partition took for that range before it existed (attaching
    refuses a range the default holds rows of; the second statement returns how many), then
    attached."""
    schema = validate_identifier(schema)
    part = f"{schema}.{partition_name(table, span[0])}"
    low, high = _bound(span[0]), _bound(span[1])
    return (
        f"CREATE TABLE {part} (LIKE {schema}.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
        f"WITH moved AS (DELETE FROM {schema}.{table}_default "
        f"WHERE expire_at >= {low} AND expire_at < {high} RETURNING *), "
        f"kept AS (INSERT INTO {part} SELECT * FROM moved) SELECT count(*) FROM moved",
        f"ALTER TABLE {schema}.{table} ATTACH PARTITION {part} FOR VALUES FROM ({low}) TO ({high})",
    )


async def ensure_ahead(pool: Pool, queries: SchemaQueries, archive_for: timedelta) -> None:
    """Make the partitions of the days the jobs archived now, for ``archive_for``, expire on
    (and of the day after: a prune that runs past midnight), where no range holds them. A
    range that cannot be made now is logged, not raised: its rows go to the default
    partition meanwhile."""
    day: date = await pool.fetchval(queries["archive_target_day"], archive_for)
    width = archive_partition_days(archive_for)
    ranges = await _ranges(pool, queries)
    for wanted in (day, day + timedelta(days=1)):
        if covering(wanted, ranges) is not None:
            continue
        try:
            await make_range(pool, queries, wanted, width)
        except asyncpg.PostgresError as exc:
            # A lock not granted in time, or a table in the way (made by hand, or left
            # behind with its registry row deleted): the prune goes on, its jobs to the
            # default partition.
            _log.warning(
                "archive_partition_deferred",
                schema=queries.schema,
                day=str(wanted),
                error=f"{type(exc).__name__}: {exc}",
            )
        ranges = await _ranges(pool, queries)


async def _ranges(pool: Pool | PoolConnectionProxy, queries: SchemaQueries) -> list[Range]:
    return [(r["starts"], r["ends"]) for r in await pool.fetch(queries["archive_partitions_list"])]


async def make_range(pool: Pool, queries: SchemaQueries, day: date, width: int) -> None:
    """Make both archive tables' partitions of the range for ``day`` (``width`` days, aligned,
    clipped to its neighbours) and register it, in one transaction, unless a range holds
    ``day`` by the time this one has the lock (one maker at a time per schema)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(queries["set_local_lock_timeout"], LOCK_TIMEOUT)
        await conn.execute(queries["archive_partitions_lock"])
        ranges = await _ranges(conn, queries)
        if covering(day, ranges) is not None:
            return  # made by a concurrent prune before this one took the lock
        span = range_to_make(day, width, ranges)
        moved = 0
        for table in ARCHIVE_TABLES:
            create, fill, attach = create_statements(queries.schema, table, span)
            await conn.execute(create)
            count = int(await conn.fetchval(fill))
            await conn.execute(attach)
            if table == "jobs_archive":
                moved = count
        await conn.execute(queries["archive_partition_add"], span[0], span[1], moved)
    _log.info(
        "archive_partition_created",
        schema=queries.schema,
        starts=str(span[0]),
        ends=str(span[1]),
        moved_from_default=moved,
    )


async def drop_ended(
    pool: Pool, queries: SchemaQueries, on_batch: Callable[[int], None] | None = None
) -> int:
    """Drop the partitions of every ended range, oldest first; returns the archived jobs
    they held. A range whose locks are not granted in time stays for the next pass."""
    total = 0
    for record in await pool.fetch(queries["archive_partitions_ended"]):
        starts: date = record["starts"]
        try:
            count = await _drop_range(pool, queries, starts)
        except asyncpg.LockNotAvailableError:
            _log.warning(
                "archive_partition_drop_deferred", schema=queries.schema, starts=str(starts)
            )
            continue
        total += count
        if on_batch is not None:
            on_batch(count)
    return total


async def _drop_range(pool: Pool, queries: SchemaQueries, starts: date) -> int:
    schema = queries.schema
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(queries["set_local_lock_timeout"], LOCK_TIMEOUT)
        # The prune's count of the range: counting ten million rows would take seconds.
        count = int(await conn.fetchval(queries["archive_partition_forget"], starts))
        for table in ARCHIVE_TABLES:
            await conn.execute(f"DROP TABLE IF EXISTS {schema}.{partition_name(table, starts)}")
    _log.info("archive_partition_dropped", schema=schema, starts=str(starts), jobs=count)
    return count
