"""Which store holds the limiter state of a process, from its settings.

TASKQ_REDIS_URL set: Redis, with PostgreSQL (the backend) as its fallback while Redis errors,
unless TASKQ_RATE_LIMIT_PG_FALLBACK_ENABLED is off. Unset: the backend itself (PostgreSQL on
the server's clock, or memory in tests). Reservation slots always live in the backend.
"""

from __future__ import annotations

from typing import Any

from taskq_core.backend.protocol.ratelimit import LimiterStore
from taskq_core.clock import Clock
from taskq_core.ratelimit.fallback import FallbackLimiterStore
from taskq_core.settings import TaskqSettings


def limiter_store(
    settings: TaskqSettings, backend: LimiterStore, *, clock: Clock, log: Any
) -> LimiterStore:
    """The limiter store the settings ask for, over ``backend``."""
    if not settings.redis_url:
        return backend
    from taskq_core.ratelimit.redis import RedisLimiterStore, default_prefix

    redis = RedisLimiterStore.from_url(
        settings.redis_url, prefix=default_prefix(settings.schema_name)
    )
    fallback = backend if settings.rate_limit_pg_fallback_enabled else None
    return FallbackLimiterStore(redis, fallback, clock=clock, log=log)


async def close_store(store: LimiterStore) -> None:
    """Close what ``limiter_store`` opened (the Redis client); the backend is not its own."""
    if isinstance(store, FallbackLimiterStore):
        await store.close()
