"""Limiter stores under test: memory (FakeClock), PostgreSQL (the test's schema) and the real
Redis on 127.0.0.1:6379, on a database index of its own (``TASKQ_TEST_REDIS_URL``, default
index 13) and a key prefix per test, so tests never share a limit.

``LimiterTarget.now()`` reads the store's own clock (FakeClock, clock_timestamp(), Redis TIME):
tests bound counts by the time that clock saw pass, never by the test's clock.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from taskq_core.backend.protocol import Backend
from taskq_core.backend.protocol.ratelimit import LimiterStore
from taskq_core.clock import FakeClock
from taskq_core.ratelimit.redis import RedisLimiterStore
from tests.backend_pair import KINDS, open_backend
from tests.conftest import PgTarget
from tests.schema_pool import give_back, take_schema

REDIS_URL = os.environ.get("TASKQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@dataclass
class LimiterTarget:
    """One limiter store and a reading of its clock."""

    kind: str
    store: LimiterStore
    clock: FakeClock | None = None
    pg: PgTarget | None = None
    closers: list[Any] = field(default_factory=list)

    async def now(self) -> float:
        """The store's clock, in seconds."""
        if self.clock is not None:
            return self.clock.now().timestamp()
        if self.pg is not None:
            conn = await asyncpg.connect(self.pg.dsn)
            try:
                value = await conn.fetchval("SELECT clock_timestamp()")
            finally:
                await conn.close()
            return float(value.timestamp())
        assert isinstance(self.store, RedisLimiterStore)
        seconds, micros = await self.store.client.time()
        return float(seconds) + float(micros) / 1_000_000

    async def travel(self, seconds: float) -> None:
        """Let ``seconds`` pass for the store (memory and PostgreSQL; Redis's TIME cannot)."""
        if self.clock is not None:
            self.clock.advance(seconds)
            return
        assert self.pg is not None, "Redis's clock cannot be moved"
        conn = await asyncpg.connect(self.pg.dsn)
        try:
            schema = self.pg.schema
            shift = "make_interval(secs => $1)"
            await conn.execute(
                f"UPDATE {schema}.rate_limit_buckets SET updated_at = updated_at - {shift}", seconds
            )
            entries = f"{schema}.rate_limit_window_entries"
            await conn.execute(f"UPDATE {entries} SET occurred_at = occurred_at - {shift}", seconds)
            lines = f"{schema}.rate_limit_lines"
            await conn.execute(f"UPDATE {lines} SET ends_at = ends_at - {shift}", seconds)
        finally:
            await conn.close()


def redis_store(prefix: str | None = None) -> RedisLimiterStore:
    """A store on the test Redis with a prefix no other test uses."""
    return RedisLimiterStore.from_url(
        REDIS_URL, prefix=prefix or f"taskq-test:{uuid.uuid4().hex[:12]}:"
    )


async def require_redis(store: RedisLimiterStore) -> None:
    """Fail loudly (not skip) when the machine's Redis is not there: these tests need it."""
    try:
        await store.client.ping()
    except Exception as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); the rate-limit tests use it")


async def drop_prefix(store: RedisLimiterStore) -> None:
    """Delete every key the test made."""
    keys = [key async for key in store.client.scan_iter(match=f"{store.prefix}*")]
    if keys:
        await store.client.delete(*keys)


@asynccontextmanager
async def open_target(kind: str, dsn: str) -> AsyncIterator[LimiterTarget]:
    """A fresh store of ``kind``, removed afterwards."""
    if kind == "memory":
        from taskq_core.backend.memory import InMemoryBackend

        clock = FakeClock()
        memory = InMemoryBackend(clock=clock)
        yield LimiterTarget("memory", memory, clock=clock)
        await memory.close()
        return
    if kind == "postgres":
        from taskq_core.backend.postgres.backend import PostgresBackend

        pg = PgTarget(dsn, await take_schema(dsn))
        backend = await PostgresBackend.connect(pg.dsn, pg.schema)
        try:
            yield LimiterTarget("postgres", backend, pg=pg)
        finally:
            await backend.close()
            await give_back(pg.dsn, pg.schema)
        return
    store = redis_store()
    await require_redis(store)
    try:
        yield LimiterTarget("redis", store)
    finally:
        await drop_prefix(store)
        await store.close()


@pytest.fixture(params=["memory", "postgres", "redis"])
async def limiter(
    request: pytest.FixtureRequest, pg_server_dsn: str
) -> AsyncIterator[LimiterTarget]:
    """Each limiter store in turn."""
    async with open_target(request.param, pg_server_dsn) as target:
        yield target


@pytest.fixture(params=["memory", "postgres"])
async def movable_limiter(
    request: pytest.FixtureRequest, pg_server_dsn: str
) -> AsyncIterator[LimiterTarget]:
    """The stores whose clock a test can move (Redis's TIME cannot be)."""
    async with open_target(request.param, pg_server_dsn) as target:
        yield target


@pytest.fixture
async def redis_limiter(pg_server_dsn: str) -> AsyncIterator[LimiterTarget]:
    """The Redis store alone."""
    async with open_target("redis", pg_server_dsn) as target:
        yield target


# Worker tests run each case on both backends.
@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened
