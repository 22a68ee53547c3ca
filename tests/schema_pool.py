"""Migrated schemas handed from one test to the next within a test process.

Creating and migrating a schema and dropping it afterwards costs the server 0.3-0.7 s (its
19 migrations; more on a loaded machine), emptying one a few milliseconds, and about 2,000
tests here each take a schema. A schema goes back to the pool only when it is as good as new:

- no ``taskq`` process is still on it (its sessions' application names name the schema: a
  worker left running would take the next test's jobs);
- its shape is the one it was made with (catalog and migration ledger fingerprint: a test
  may alter a table or tamper with a checksum);
- its rows are deleted (the migration ledger aside; the archive's partitions a prune made
  are dropped), its sequences restarted, its tables' statistics counters reset. (No
  test points a Redis limiter at such a schema's default prefix: the Redis tests use
  prefixes of their own.)

Otherwise it is dropped, as every schema was before. Rows deleted leave dead tuples and
grown files behind, which only tests of the tables' physical state see (plans, sizes,
vacuum): they are marked ``fresh_schema`` and get a new one.
"""

from __future__ import annotations

import itertools
import os
import threading

import asyncpg

from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.constants import validate_identifier

_schema_ids = itertools.count(1)
_lock = threading.Lock()  # the browser tests make their servers' schemas in threads
_spare: dict[str, list[tuple[str, str]]] = {}  # dsn -> (schema, fingerprint) ready for reuse
_taken: dict[str, str] = {}  # schema -> its fingerprint when made, while a test has it

# The catalog objects of a schema: tables and their columns, defaults and options, indexes,
# constraints, functions, triggers and types. Schema-qualified names differ between schemas,
# so a fingerprint is only ever compared with one of the same schema.
_FINGERPRINT = """
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
    SELECT c.relname || ':' || c.relkind::text || ':' || coalesce(c.reloptions::text, '')
           || ':' || coalesce(pg_get_indexdef(c.oid), '') AS item
    FROM pg_class c WHERE c.relnamespace = $1::regnamespace
    UNION ALL
    SELECT a.attrelid::regclass::text || '.' || a.attname || ':'
           || format_type(a.atttypid, a.atttypmod) || ':' || a.attnotnull::text || ':'
           || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT p.proname || ':' || md5(p.prosrc) FROM pg_proc p
    WHERE p.pronamespace = $1::regnamespace
    UNION ALL
    SELECT conname || ':' || pg_get_constraintdef(oid) FROM pg_constraint
    WHERE connamespace = $1::regnamespace
    UNION ALL
    SELECT t.tgname || ':' || t.tgenabled::text FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT t.typname || ':' || coalesce((SELECT string_agg(e.enumlabel, '|' ORDER BY
           e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
    FROM pg_type t WHERE t.typnamespace = $1::regnamespace
) objects
"""

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


async def create_migrated_schema(dsn: str) -> str:
    """Create and migrate a schema no other test uses; return its name."""
    return (await _create(dsn))[0]


async def _create(dsn: str) -> tuple[str, str]:
    schema = new_schema_name()
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
        return schema, await _fingerprint(conn, schema)
    finally:
        await conn.close()


async def take_schema(dsn: str) -> str:
    """A migrated schema of the caller's own: an emptied one, or a new one."""
    with _lock:
        spare = _spare.get(dsn)
        if spare:
            schema, fingerprint = spare.pop()
            _taken[schema] = fingerprint
            return schema
    schema, fingerprint = await _create(dsn)
    with _lock:
        _taken[schema] = fingerprint
    return schema


async def give_back(dsn: str, schema: str) -> None:
    """Empty ``schema`` for the next test, or drop it when it is not as good as new."""
    with _lock:
        fingerprint = _taken.pop(schema, None)
    if fingerprint is not None and await _emptied(dsn, schema, fingerprint):
        with _lock:
            _spare.setdefault(dsn, []).append((schema, fingerprint))
        return
    await drop_schema(dsn, schema)


async def _emptied(dsn: str, schema: str, fingerprint: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError):
        return False
    try:
        if await conn.fetchval(_SESSIONS, schema):
            return False
        await _drop_archive_partitions(conn, schema)
        if await _fingerprint(conn, schema) != fingerprint:
            return False
        await conn.execute(_empty_statement(schema, await conn.fetch(_TABLES, schema)))
        return True
    except asyncpg.PostgresError:  # a table locked, statistics not ours to reset, ...
        return False
    finally:
        await conn.close()


async def _fingerprint(conn: asyncpg.Connection, schema: str) -> str:
    """The schema's catalog objects and its migration ledger (a test may tamper with it)."""
    validate_identifier(schema)
    ledger = (
        f"SELECT md5(string_agg(m::text, ',' ORDER BY m::text)) FROM {schema}.schema_migrations m"
    )
    return f"{await conn.fetchval(_FINGERPRINT, schema)}:{await conn.fetchval(ledger)}"


async def delete_every_row(dsn: str, schema: str) -> None:
    """Delete every row of the schema (the migration ledger aside) and the archive's
    partitions a prune made: a fresh start, cheaper than a new schema or TRUNCATE for a few
    dozen rows."""
    conn = await asyncpg.connect(dsn)
    try:
        await _drop_archive_partitions(conn, schema)
        await conn.execute(";".join(_deletes(schema, await conn.fetch(_TABLES, schema))))
    finally:
        await conn.close()


async def _drop_archive_partitions(conn: asyncpg.Connection, schema: str) -> None:
    """Drop the archive's partitions a prune made: the schema goes back as migrated."""
    validate_identifier(schema)
    days = await conn.fetch(_ARCHIVE_PARTITIONS, schema)
    if days:
        await conn.execute(f"DROP TABLE {', '.join(f'{schema}.{d[0]}' for d in days)}")


def _deletes(schema: str, tables: list[asyncpg.Record]) -> list[str]:
    validate_identifier(schema)
    return [f"DELETE FROM {schema}.{t['tablename']}" for t in tables]


def _empty_statement(schema: str, tables: list[asyncpg.Record]) -> str:
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
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


async def drop_spare_schemas() -> None:
    """Drop every spare schema (at the session's end: a TASKQ_TEST_DSN server outlives it)."""
    with _lock:
        spare = [(dsn, schema) for dsn, kept in _spare.items() for schema, _ in kept]
        _spare.clear()
    for dsn, schema in spare:
        await drop_schema(dsn, schema)
