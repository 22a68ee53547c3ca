"""The archive by day: ``jobs_archive`` and ``job_attempts_archive`` are partitioned by range
of ``expire_at``, one partition of each per UTC day (migration 0022, sql/retention.sql "The
archive by day"). The prune creates a day's two partitions ahead of the days its jobs will
expire on; the expiry drops them whole once the day has ended, instead of deleting its rows
one by one (no per-row WAL, no dead tuples, no vacuum).

Partition DDL takes no bound parameters: the statements are built here from the validated
schema name and a ``date`` (digits only), never from text a user typed. Each change runs in
a transaction with a lock timeout, so a long read of the archive makes it give up (the next
pass tries again) rather than queue every other reader of the archive behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta

import asyncpg
import structlog
from asyncpg.pool import Pool

from taskq_core.constants import validate_identifier

from .queries import SchemaQueries

ARCHIVE_TABLES = ("jobs_archive", "job_attempts_archive")
# How long a partition change waits for the archive's locks before it gives up for this pass.
LOCK_TIMEOUT = "5s"

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")


def partition_name(table: str, day: date) -> str:
    """The partition of ``table`` holding the rows that expire on ``day`` (UTC)."""
    return f"{table}_{day:%Y%m%d}"


def _bound(day: date) -> str:
    """Midnight UTC at the start of ``day``, as a literal (a ``date`` prints digits only)."""
    return f"'{day.isoformat()} 00:00:00+00'"


def create_statements(schema: str, table: str, day: date) -> list[str]:
    """The statements that give ``table`` its partition of ``day``: built detached, filled
    with the rows the default partition took for that day before it existed (attaching
    refuses a range the default holds rows of), then attached."""
    schema = validate_identifier(schema)
    part = f"{schema}.{partition_name(table, day)}"
    low, high = _bound(day), _bound(day + timedelta(days=1))
    return [
        f"CREATE TABLE {part} (LIKE {schema}.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
        f"WITH moved AS (DELETE FROM {schema}.{table}_default "
        f"WHERE expire_at >= {low} AND expire_at < {high} RETURNING *) "
        f"INSERT INTO {part} SELECT * FROM moved",
        f"ALTER TABLE {schema}.{table} ATTACH PARTITION {part} FOR VALUES FROM ({low}) TO ({high})",
    ]


async def ensure_ahead(pool: Pool, queries: SchemaQueries, archive_for: timedelta) -> None:
    """Create the partitions of the days the jobs archived now, for ``archive_for``, expire
    on (and of the day after), where missing. A day that cannot be made now (a lock not
    granted in time) is logged: its rows go to the default partition meanwhile."""
    for record in await pool.fetch(queries["archive_days_missing"], archive_for):
        day: date = record["day"]
        try:
            await create_day(pool, queries, day)
        except asyncpg.LockNotAvailableError:
            _log.warning("archive_partition_deferred", schema=queries.schema, day=str(day))


async def create_day(pool: Pool, queries: SchemaQueries, day: date) -> None:
    """Give both archive tables their partition of ``day`` where missing, in one transaction
    (one creator at a time per schema)."""
    made = []
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(queries["set_local_lock_timeout"], LOCK_TIMEOUT)
        await conn.execute(queries["archive_days_lock"])
        for table in ARCHIVE_TABLES:
            name = partition_name(table, day)
            if await conn.fetchval(queries["archive_day_exists"], name):
                continue  # made by a concurrent prune before this one took the lock
            for statement in create_statements(queries.schema, table, day):
                await conn.execute(statement)
            made.append(name)
    if made:
        _log.info("archive_partition_created", schema=queries.schema, day=str(day), tables=made)


async def drop_ended(
    pool: Pool, queries: SchemaQueries, on_batch: Callable[[int], None] | None = None
) -> int:
    """Drop the partitions of every ended day, oldest first; returns the archived jobs they
    held. A day whose locks are not granted in time stays for the next pass."""
    total = 0
    for record in await pool.fetch(queries["archive_days_ended"]):
        day: date = record["day"]
        try:
            count = await _drop_day(pool, queries, day)
        except asyncpg.LockNotAvailableError:
            _log.warning("archive_partition_drop_deferred", schema=queries.schema, day=str(day))
            continue
        total += count
        if on_batch is not None:
            on_batch(count)
    await pool.execute(queries["archive_days_forget_ended"])
    return total


async def _drop_day(pool: Pool, queries: SchemaQueries, day: date) -> int:
    schema = queries.schema
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(queries["set_local_lock_timeout"], LOCK_TIMEOUT)
        # The prune's count of the day: counting ten million rows would take seconds.
        count = int(await conn.fetchval(queries["archive_day_forget"], day))
        for table in ARCHIVE_TABLES:
            await conn.execute(f"DROP TABLE IF EXISTS {schema}.{partition_name(table, day)}")
    _log.info("archive_partition_dropped", schema=schema, day=str(day), jobs=count)
    return count
