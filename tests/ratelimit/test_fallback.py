"""Redis -> PostgreSQL fallback: when Redis stops answering mid-run, acquires go to the
Postgres state and the limit still holds; without the fallback, a Redis error never admits a
job unlimited."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import structlog
from redis.asyncio import Redis

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.clock import FakeClock
from taskq_core.ratelimit.fallback import FallbackLimiterStore, LimiterStoreUnavailableError
from taskq_core.ratelimit.redis import RedisLimiterStore, client_options
from tests.conftest import PgTarget
from tests.ratelimit.conftest import drop_prefix, redis_store, require_redis


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def unreachable_client() -> Redis:
    return Redis(host="127.0.0.1", port=closed_port(), **client_options(0.5))


@pytest.fixture
async def redis() -> AsyncIterator[RedisLimiterStore]:
    store = redis_store()
    await require_redis(store)
    live = store.client
    yield store
    store.retarget(live)
    await drop_prefix(store)
    await live.aclose()


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield backend
    await backend.close()


async def pg_now(backend: PostgresBackend) -> float:
    async with backend.transaction() as conn:
        return float((await conn.fetchval("SELECT clock_timestamp()")).timestamp())


async def test_when_redis_goes_away_the_postgres_state_keeps_the_limit(
    redis: RedisLimiterStore, backend: PostgresBackend, pg: PgTarget
) -> None:
    clock = FakeClock()
    store = FallbackLimiterStore(redis, backend, clock=clock, log=structlog.get_logger())
    rate, burst = 1.0, 3.0
    on_redis = [(await store.acquire_token("pay", rate, burst)).allowed for _ in range(5)]
    assert on_redis[:3] == [True, True, True] and not store.degraded
    assert store.fallbacks == 0

    redis.retarget(unreachable_client())  # Redis traffic stops mid-run
    started = await pg_now(backend)
    grants = [await store.acquire_token("pay", rate, burst) for _ in range(20)]
    elapsed = await pg_now(backend) - started
    allowed = sum(grant.allowed for grant in grants)
    assert store.degraded and store.fallbacks == 20
    # The Postgres bucket starts full and then admits only its refill, on the server's clock.
    assert burst <= allowed <= burst + rate * elapsed
    async with backend.transaction() as conn:
        tokens = await conn.fetchval(
            f"SELECT tokens FROM {pg.schema}.rate_limit_buckets WHERE key = 'pay'"
        )
    assert tokens < 1

    windows = [await store.acquire_window("sms", 2, timedelta(minutes=1)) for _ in range(4)]
    assert [grant.allowed for grant in windows] == [True, True, False, False]


async def test_redis_is_asked_again_once_it_has_rested(
    redis: RedisLimiterStore, backend: PostgresBackend
) -> None:
    clock = FakeClock()
    store = FallbackLimiterStore(
        redis, backend, clock=clock, log=structlog.get_logger(), retry_after=5.0
    )
    live = redis.client
    redis.retarget(unreachable_client())
    assert (await store.acquire_token("k", 1.0, 1.0)).allowed  # answered by Postgres
    assert store.degraded
    redis.retarget(live)
    clock.advance(5.0)
    assert (await store.acquire_token("k", 1.0, 1.0)).allowed  # Redis's own bucket: full
    assert not store.degraded and store.fallbacks == 1


async def test_without_the_fallback_a_redis_error_admits_nothing(
    redis: RedisLimiterStore,
) -> None:
    store = FallbackLimiterStore(redis, None, clock=FakeClock(), log=structlog.get_logger())
    redis.retarget(unreachable_client())
    with pytest.raises(LimiterStoreUnavailableError, match="FALLBACK_ENABLED is off"):
        await store.acquire_token("k", 1.0, 1.0)
