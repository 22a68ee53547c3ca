"""The test schema pool hands a schema to the next test only as good as new: emptied when
the test changed rows alone, dropped when it changed the schema's shape (a table, an index,
a function, a setting, the migration ledger), so no test sees what an earlier one did."""

from __future__ import annotations

import asyncpg
import pytest

from tests import schema_pool
from tests.schema_pool import give_back, take_schema

pytestmark = pytest.mark.postgres

CHANGES = {
    "a column": "ALTER TABLE {s}.jobs ADD COLUMN extra int",
    "an index": "CREATE INDEX ON {s}.jobs (actor)",
    "a table option": "ALTER TABLE {s}.jobs SET (fillfactor = 70)",
    "a default": "ALTER TABLE {s}.jobs ALTER COLUMN priority SET DEFAULT 7",
    "a function": "CREATE OR REPLACE FUNCTION {s}.actor_not_in(actor text, excluded text[]) "
    "RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'",
    "a dropped constraint": "ALTER TABLE {s}.job_events DROP CONSTRAINT job_events_job_id_fkey",
    "the ledger": "UPDATE {s}.schema_migrations SET checksum = 'tampered' WHERE version = '0001'",
}


async def run(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def spare(dsn: str) -> list[str]:
    return [schema for schema, _ in schema_pool._spare.get(dsn, [])]


async def test_a_schema_whose_rows_alone_changed_comes_back_emptied(pg_server_dsn: str) -> None:
    schema = await take_schema(pg_server_dsn)
    await run(pg_server_dsn, f"INSERT INTO {schema}.queues (name) VALUES ('q')")
    await give_back(pg_server_dsn, schema)
    assert schema in spare(pg_server_dsn)
    assert await take_schema(pg_server_dsn) == schema  # the last one given back comes first
    try:
        conn = await asyncpg.connect(pg_server_dsn)
        try:
            assert await conn.fetchval(f"SELECT count(*) FROM {schema}.queues") == 0
        finally:
            await conn.close()
    finally:
        await give_back(pg_server_dsn, schema)


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_schema_whose_shape_changed_is_dropped(pg_server_dsn: str, change: str) -> None:
    schema = await take_schema(pg_server_dsn)
    await run(pg_server_dsn, CHANGES[change].format(s=schema))
    await give_back(pg_server_dsn, schema)
    assert schema not in spare(pg_server_dsn)
    conn = await asyncpg.connect(pg_server_dsn)
    try:
        assert not await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema
        )
    finally:
        await conn.close()


async def test_a_change_rolled_back_leaves_the_schema_reusable(pg_server_dsn: str) -> None:
    schema = await take_schema(pg_server_dsn)
    conn = await asyncpg.connect(pg_server_dsn)
    try:
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with conn.transaction():
                await conn.execute(f"CREATE INDEX ON {schema}.jobs (actor)")
                await conn.execute("SELECT 1 / 0")
    finally:
        await conn.close()
    await give_back(pg_server_dsn, schema)
    assert schema in spare(pg_server_dsn)
