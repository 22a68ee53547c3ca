"""Migrated schemas handed from one test to the next within a test process.

Creating and migrating a schema and dropping it afterwards costs the server 0.3-0.7 s (its
19 migrations; more on a loaded machine), emptying one a few milliseconds, and about 2,000
tests here each take a schema. A schema goes back to the pool only when it is as good as new:

- no ``taskq`` process is still on it (its sessions' application names name the schema: a
  worker left running would take the next test's jobs);
- its shape is the one it was made with (the catalog rows of its objects and its migration
  ledger: a test may alter a table or tamper with a checksum);
- its rows are deleted (the migration ledger aside; the archive's partitions a prune made
  are dropped), its sequences restarted, its tables' statistics counters reset. (No
  test points a Redis limiter at such a schema's default prefix: the Redis tests use
  prefixes of their own.)

Otherwise it is dropped, as every schema was before. Rows deleted leave dead tuples and
grown files behind, which only tests of the tables' physical state see (plans, sizes,
vacuum): they are marked ``fresh_schema`` and get a new one.

The checks, emptying and drops go through one connection per server and test process, kept
open by a thread of its own (``_Keeper``): a connection made for each test cost the server a
new backend with cold catalog caches every time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.constants import validate_identifier


@dataclass(frozen=True)
class _Shape:
    """What a schema was made as: its catalog rows' signature, its migration ledger, and
    its tables (the ledger aside) to empty."""

    catalog: str
    ledger: str
    tables: tuple[str, ...]


_schema_ids = itertools.count(1)
_lock = threading.Lock()  # the browser tests make their servers' schemas in threads
_spare: dict[str, list[tuple[str, _Shape]]] = {}  # dsn -> (schema, shape) ready for reuse
_taken: dict[str, _Shape] = {}  # schema -> its shape when made, while a test has it

T = TypeVar("T")

# The shape of a schema: how many catalog rows its objects have (tables and indexes, their
# columns and defaults, constraints, triggers, functions, types and enum labels) and the
# newest transaction that wrote one. DDL inserts, deletes or rewrites such rows, so any
# change moves a count or the newest writer (a rolled-back change writes nothing anyone
# sees; VACUUM and ANALYZE update pg_class in place, as no writer). It replaced deparsing
# every definition, at a third of its server time over the suite.
_CATALOGS = (  # each catalog `x`, and where its row's schema is read
    ("pg_class x", "x.relnamespace"),
    ("pg_attribute x JOIN pg_class c ON c.oid = x.attrelid", "c.relnamespace"),
    ("pg_attrdef x JOIN pg_class c ON c.oid = x.adrelid", "c.relnamespace"),
    ("pg_index x JOIN pg_class c ON c.oid = x.indrelid", "c.relnamespace"),
    ("pg_constraint x", "x.connamespace"),
    ("pg_trigger x JOIN pg_class c ON c.oid = x.tgrelid", "c.relnamespace"),
    ("pg_proc x", "x.pronamespace"),
    ("pg_type x", "x.typnamespace"),
    ("pg_enum x JOIN pg_type t ON t.oid = x.enumtypid", "t.typnamespace"),
)
_SHAPE = "SELECT concat_ws(',', {})".format(
    ", ".join(
        f"(SELECT count(*) || ':' || coalesce(max(x.xmin::text::bigint), 0) FROM {source} "
        f"WHERE {schema_of} = $1::regnamespace)"
        for source, schema_of in _CATALOGS
    )
)

# Sessions of a taskq process still on the schema: a worker's LISTEN or leader connection
# (direct, never through PgBouncer), or a pool's connection at work. An idle pool session
# named for the schema may be PgBouncer's, kept after its client left.
_SESSIONS = """
SELECT count(*) FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND (application_name IN ('taskq_listen_' || $1, 'taskq_leader_' || $1)
       OR (application_name = 'taskq_' || $1 AND state <> 'idle'))
"""

# The archive's partitions of a time range (the prune makes them ahead of the days it
# archives for).
_ARCHIVE_PARTITIONS = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'
  AND c.relname ~ '^(jobs_archive|job_attempts_archive)_[0-9]{8}$'
"""
_TABLES = """
SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> 'schema_migrations'
"""


def new_schema_name() -> str:
    """A schema name no other test in any process uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return f"t_{worker}_{os.getpid()}_{next(_schema_ids)}"


class _Keeper:
    """A thread with an event loop and one open connection per server: callers in any thread
    and any event loop run their statements on it, one caller at a time per server."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._connections: dict[str, asyncpg.Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        threading.Thread(target=self._loop.run_forever, name="schema-pool", daemon=True).start()

    async def run(self, dsn: str, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` on the kept connection to ``dsn``, awaited from the caller's loop."""
        done: Future[T] = asyncio.run_coroutine_threadsafe(self._run(dsn, work), self._loop)
        return await asyncio.wrap_future(done)

    async def _run(self, dsn: str, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        async with self._locks.setdefault(dsn, asyncio.Lock()):
            conn = self._connections.get(dsn)
            if conn is None or conn.is_closed():
                conn = self._connections[dsn] = await asyncpg.connect(dsn)
            try:
                return await work(conn)
            except (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError):
                await conn.close(timeout=5)  # the next call connects again
                raise

    def close(self) -> None:
        """Close every kept connection (the session's end)."""

        async def close_all() -> None:
            for conn in self._connections.values():
                await conn.close(timeout=5)
            self._connections.clear()

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(30)


_keeper = _Keeper()


def close_kept_connections() -> None:
    """Close the pool's connections before the session's server stops."""
    _keeper.close()


async def create_migrated_schema(dsn: str) -> str:
    """Create and migrate a schema no other test uses; return its name."""
    return (await _create(dsn))[0]


async def _create(dsn: str) -> tuple[str, _Shape]:
    # A connection of its own: migrations are rare (a new schema is made only when no
    # emptied one waits) and would hold the kept one for half a second.
    schema = new_schema_name()
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
        return schema, await _shape(conn, schema)
    finally:
        await conn.close()


async def take_schema(dsn: str) -> str:
    """A migrated schema of the caller's own: an emptied one, or a new one."""
    with _lock:
        spare = _spare.get(dsn)
        if spare:
            schema, shape = spare.pop()
            _taken[schema] = shape
            return schema
    schema, shape = await _create(dsn)
    with _lock:
        _taken[schema] = shape
    return schema


async def give_back(dsn: str, schema: str) -> None:
    """Empty ``schema`` for the next test, or drop it when it is not as good as new."""
    with _lock:
        shape = _taken.pop(schema, None)
    if shape is not None and await _emptied(dsn, schema, shape):
        with _lock:
            _spare.setdefault(dsn, []).append((schema, shape))
        return
    await drop_schema(dsn, schema)


async def _emptied(dsn: str, schema: str, shape: _Shape) -> bool:
    async def empty(conn: asyncpg.Connection) -> bool:
        if await conn.fetchval(_SESSIONS, schema):
            return False
        await _drop_archive_partitions(conn, schema)
        if await _shape(conn, schema) != shape:
            return False
        await conn.execute(_empty_statement(schema, shape.tables))
        return True

    try:
        return await _keeper.run(dsn, empty)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False  # a table locked, statistics not ours to reset, the server gone, ...


async def _shape(conn: asyncpg.Connection, schema: str) -> _Shape:
    validate_identifier(schema)
    ledger = (
        f"SELECT md5(string_agg(m::text, ',' ORDER BY m::text)) FROM {schema}.schema_migrations m"
    )
    tables = tuple(sorted(r["tablename"] for r in await conn.fetch(_TABLES, schema)))
    return _Shape(await conn.fetchval(_SHAPE, schema), await conn.fetchval(ledger), tables)


async def delete_every_row(dsn: str, schema: str) -> None:
    """Delete every row of the schema (the migration ledger aside) and the archive's
    partitions a prune made: a fresh start, cheaper than a new schema or TRUNCATE for a few
    dozen rows."""

    async def delete(conn: asyncpg.Connection) -> None:
        await _drop_archive_partitions(conn, schema)
        tables = [r["tablename"] for r in await conn.fetch(_TABLES, schema)]
        await conn.execute(";".join(_deletes(schema, tables)))

    await _keeper.run(dsn, delete)


async def _drop_archive_partitions(conn: asyncpg.Connection, schema: str) -> None:
    """Drop the archive's partitions a prune made: the schema goes back as migrated."""
    validate_identifier(schema)
    days = await conn.fetch(_ARCHIVE_PARTITIONS, schema)
    if days:
        await conn.execute(f"DROP TABLE {', '.join(f'{schema}.{d[0]}' for d in days)}")


def _deletes(schema: str, tables: Sequence[str]) -> list[str]:
    validate_identifier(schema)
    return [f"DELETE FROM {schema}.{table}" for table in tables]


def _empty_statement(schema: str, tables: Sequence[str]) -> str:
    return ";".join(
        [
            *_deletes(schema, tables),
            f"SELECT setval(s.oid, 1, false) FROM pg_class s WHERE s.relkind = 'S' "
            f"AND s.relnamespace = '{schema}'::regnamespace",
            f"SELECT pg_stat_reset_single_table_counters(c.oid) FROM pg_class c "
            f"WHERE c.relnamespace = '{schema}'::regnamespace AND c.relkind IN ('r', 'i')",
        ]
    )


async def drop_schema(dsn: str, schema: str) -> None:
    validate_identifier(schema)
    await _keeper.run(dsn, lambda conn: conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


async def drop_spare_schemas() -> None:
    """Drop every spare schema (at the session's end: a TASKQ_TEST_DSN server outlives it)."""
    with _lock:
        spare = [(dsn, schema) for dsn, kept in _spare.items() for schema, _ in kept]
        _spare.clear()
    for dsn, schema in spare:
        await drop_schema(dsn, schema)
