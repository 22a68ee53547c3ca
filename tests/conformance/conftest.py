"""The conformance harness: every test here runs against both backends.

A test takes the ``harness`` fixture and uses ``harness.backend``; ``harness.now()`` reads the
backend's clock and ``harness.travel(seconds)`` makes that much time pass for every time
predicate (memory: the FakeClock moves; Postgres: every stored timestamp of the test's schema
moves back). Postgres-only semantics are marked ``@pytest.mark.postgres_only("reason")``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.protocol import Backend
from taskq_core.clock import FakeClock
from tests.conftest import PgTarget
from tests.schema_pool import create_migrated_schema, drop_schema, give_back, take_schema

# Every timestamp column a time predicate can look at, per table.
_JOB_TIMES = [
    "scheduled_at",
    "created_at",
    "lock_expires_at",
    "claimed_at",
    "started_at",
    "finished_at",
    "cancel_requested_at",
    "schedule_to_close",
    "result_expires_at",
    "updated_at",
    "unique_until",
]
_TIME_COLUMNS = {
    "jobs": _JOB_TIMES,
    "job_events": ["occurred_at"],
    "job_attempts": ["started_at", "finished_at"],
    "jobs_archive": [*_JOB_TIMES, "archived_at", "expire_at"],
    "job_attempts_archive": ["started_at", "finished_at", "expire_at"],
    "workers": ["started_at", "last_seen_at", "stopped_at", "acknowledged_at"],
    "maintenance_leader": ["elected_at", "last_seen_at"],
    "reservation_slots": ["lease_expires_at"],
    "rate_limit_buckets": ["updated_at"],
    "rate_limit_window_entries": ["occurred_at"],
    "rate_limit_lines": ["ends_at"],
    "schedules": ["next_fire_at", "last_fired_at", "created_at", "updated_at"],
    "batches": ["created_at", "completed_at"],
    "workflows": ["created_at", "finished_at", "cancel_requested_at"],
}


@dataclass
class Harness:
    """One backend under test plus control over its clock."""

    kind: str
    backend: Backend
    clock: FakeClock | None = None
    pg: PgTarget | None = None

    async def now(self) -> datetime:
        """The backend's idea of now."""
        if self.clock is not None:
            return self.clock.now()
        assert self.pg is not None
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            value: datetime = await conn.fetchval("SELECT clock_timestamp()")
            return value
        finally:
            await conn.close()

    async def travel(self, seconds: float) -> None:
        """Let ``seconds`` pass for every time predicate of the backend."""
        if self.clock is not None:
            self.clock.advance(seconds)
            return
        assert self.pg is not None
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            async with conn.transaction():
                for table, columns in _TIME_COLUMNS.items():
                    sets = ", ".join(f"{c} = {c} - make_interval(secs => $1)" for c in columns)
                    await conn.execute(f"UPDATE {self.pg.schema}.{table} SET {sets}", seconds)
        finally:
            await conn.close()

    async def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Run SQL on the test schema (Postgres only; ``{schema}`` is substituted)."""
        assert self.pg is not None, "sql() is only for postgres_only tests"
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            return list(await conn.fetch(query.replace("{schema}", self.pg.schema), *args))
        finally:
            await conn.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres_only(reason): semantics only the Postgres backend has"
    )


# Dispatch has two statements on Postgres: the plain one (strict_fifo, no caps) runs when it
# applies, the general one otherwise. The dispatch tests run once more with the general one
# forced, so both stay held to the same behaviour (what they read to decide is Postgres-only:
# tests/postgres/test_dispatch_windows.py; that they claim the same jobs from one snapshot:
# tests/postgres/test_dispatch_statements.py).
_GENERAL_DISPATCH_MODULES = {"tests.conformance.test_dispatch"}


# The Postgres half runs once more with the pooled DSN through a real PgBouncer in transaction
# mode (the direct DSN on the server, as a deployment splits them): every statement and
# transaction of the general pool must work without a session of its own.
# Modules whose statements all run on the direct DSN (dispatch, leases and heartbeats, the
# leader's locks) gain nothing from the pass and are left out of it, to keep CI short.
_THROUGH_PGBOUNCER = pytest.param("postgres-pgbouncer", marks=pytest.mark.slow)
_DIRECT_ONLY_MODULES = {
    "tests.conformance.test_dispatch",
    "tests.conformance.test_heartbeat",
    "tests.conformance.test_leases",
    "tests.conformance.test_sweep_locks",
    "tests.conformance.test_workers_leader",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness" in metafunc.fixturenames:
        kinds: list[Any] = ["memory", "postgres"]
        if metafunc.module.__name__ not in _DIRECT_ONLY_MODULES:
            kinds.append(_THROUGH_PGBOUNCER)
        if metafunc.module.__name__ in _GENERAL_DISPATCH_MODULES:
            kinds.append("postgres-general-dispatch")
        metafunc.parametrize("harness", kinds, indirect=True)


@pytest.fixture
async def harness(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Harness]:
    """The backend under test, once per implementation (``postgres-pgbouncer``: its pooled
    DSN through PgBouncer)."""
    marker = request.node.get_closest_marker("postgres_only")
    if request.param == "memory":
        if marker is not None:
            pytest.skip(f"postgres only: {marker.args[0] if marker.args else ''}")
        from taskq_core.backend.memory import InMemoryBackend

        clock = FakeClock()
        memory = InMemoryBackend(clock=clock)
        yield Harness("memory", memory, clock=clock)
        await memory.close()
        return
    from taskq_core.backend.postgres.backend import PostgresBackend

    pooled = pg_server_dsn
    if request.param == "postgres-pgbouncer":
        pooled = request.getfixturevalue("pgbouncer").dsn()
    pg = PgTarget(pg_server_dsn, await take_schema(pg_server_dsn))
    plain = request.param != "postgres-general-dispatch"
    backend = await PostgresBackend.connect(
        pooled, pg.schema, direct_dsn=pg.dsn, plain_dispatch=plain
    )
    try:
        yield Harness("postgres", backend, pg=pg)
    finally:
        await backend.close()
        await give_back(pg.dsn, pg.schema)


# --- the differential tests' schema ----------------------------------------------------------
@pytest.fixture
def differential_schema(pg_server_dsn: str) -> Iterator[PgTarget]:
    """One migrated schema for every sequence of a differential test, emptied before each
    (``tests.schema_pool.delete_every_row``)."""
    pg = PgTarget(pg_server_dsn, asyncio.run(create_migrated_schema(pg_server_dsn)))
    yield pg
    asyncio.run(drop_schema(pg.dsn, pg.schema))
