"""FallbackLimiterStore: Redis first; PostgreSQL while Redis errors
(TASKQ_RATE_LIMIT_PG_FALLBACK_ENABLED).

When a Redis call fails (refused, timed out, any Redis error), the same acquire goes to the
fallback store and Redis rests for ``retry_after`` seconds before it is asked again; every
acquire meanwhile goes straight to the fallback. The two stores keep their own state: a limit
that moves from one to the other starts from the new store's state (a bucket never seen is
full), so the switch may admit up to one extra burst. Without a fallback, a Redis error raises
LimiterStoreUnavailableError, and the worker holds the job back instead of running it
unlimited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from taskq_core.backend.protocol.ratelimit import LimiterStore, LimitGrant
from taskq_core.clock import Clock
from taskq_core.errors import TaskqError

T = TypeVar("T")

# How long Redis rests after an error before it is asked again.
REDIS_RETRY_AFTER = 5.0


class LimiterStoreUnavailableError(TaskqError):
    """The limiter's store cannot be reached and no fallback is configured."""


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a failing Redis raises: its own errors plus the OS's and timeouts."""
    from redis.exceptions import RedisError

    return (RedisError, OSError, TimeoutError)


class FallbackLimiterStore:
    """A LimiterStore over a primary (Redis) and an optional fallback (PostgreSQL)."""

    # Plain field assignments, alike the constructors of EnqueuePlanner (enqueue_plan.py),
    # HookPipe and ParentWatch by shape only: other data.
    def __init__(
        self,
        primary: LimiterStore,
        fallback: LimiterStore | None,
        *,
        clock: Clock,
        log: Any,
        errors: tuple[type[BaseException], ...] | None = None,
        retry_after: float = REDIS_RETRY_AFTER,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.clock = clock
        self.log = log
        self.errors = errors if errors is not None else redis_errors()
        self.retry_after = retry_after
        self.resting_until: float | None = None  # monotonic; set while Redis rests
        self.fallbacks = 0  # acquires answered by the fallback (tests, /metrics)

    @property
    def degraded(self) -> bool:
        """Whether acquires go to the fallback now."""
        return self.resting_until is not None and self.clock.monotonic() < self.resting_until

    async def acquire_token(self, key: str, rate: float, burst: float, cost: int = 1) -> LimitGrant:
        """``cost`` tokens, from Redis or, while it errors, from the fallback."""
        return await self._call(lambda store: store.acquire_token(key, rate, burst, cost))

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        """The calls' tokens, from Redis or, while it errors, from the fallback."""
        return await self._call(lambda store: store.acquire_tokens(key, rate, burst, costs))

    async def acquire_window(
        self, key: str, limit: int, window: timedelta, cost: int = 1
    ) -> LimitGrant:
        """``cost`` window entries, from Redis or, while it errors, from the fallback."""
        return await self._call(lambda store: store.acquire_window(key, limit, window, cost))

    async def _call(self, acquire: Callable[[LimiterStore], Awaitable[T]]) -> T:
        if not self.degraded:
            try:
                grant = await acquire(self.primary)
            except self.errors as exc:
                self._primary_failed(exc)
            else:
                if self.resting_until is not None:
                    self.resting_until = None
                    self.log.info("rate_limit_redis_restored")
                return grant
        if self.fallback is None:
            raise LimiterStoreUnavailableError(
                "Redis is unavailable and TASKQ_RATE_LIMIT_PG_FALLBACK_ENABLED is off"
            )
        self.fallbacks += 1
        return await acquire(self.fallback)

    async def close(self) -> None:
        """Close the primary store's connections (the fallback is the backend: not ours)."""
        close = getattr(self.primary, "close", None)
        if close is not None:
            await close()

    def _primary_failed(self, exc: BaseException) -> None:
        first = self.resting_until is None
        self.resting_until = self.clock.monotonic() + self.retry_after
        if first:
            self.log.warning(
                "rate_limit_redis_unavailable",
                error=f"{type(exc).__name__}: {exc}",
                fallback="postgres" if self.fallback is not None else None,
                retry_in=self.retry_after,
            )
