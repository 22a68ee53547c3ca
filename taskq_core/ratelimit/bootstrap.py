"""A worker's rate limits at start: which registry, each actor's limits, and the limiter.

The registry is, in order: the one given to the worker; a RateLimitRegistry the DI provider
registry holds as a value (``providers.register_value(RateLimitRegistry, registry)``); the
module-level ``default_registry``. Giving one both ways is refused, as is providing it from a
factory (the worker needs it before any scope exists). Resolution errors are ConfigError lines
naming the actor and the limit, raised before the worker touches the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol.ratelimit import LimitDefinition, RateLimitBackend
from taskq_core.clock import Clock
from taskq_core.di import ProviderRegistry
from taskq_core.errors import ConfigError
from taskq_core.ratelimit.gate import RateLimiter
from taskq_core.ratelimit.primitives import ConcurrencyReservation, SlidingWindow, TokenBucket
from taskq_core.ratelimit.registry import ActorLimits, RateLimitRegistry, default_registry
from taskq_core.ratelimit.stores import close_store, limiter_store
from taskq_core.settings import TaskqSettings


def choose_registry(
    given: RateLimitRegistry | None, providers: ProviderRegistry
) -> RateLimitRegistry:
    """The registry a worker uses (see the module docstring for the order)."""
    provider = providers.get(RateLimitRegistry)
    if provider is None:
        return given if given is not None else default_registry
    if provider.factory is not None or not isinstance(provider.value, RateLimitRegistry):
        raise ConfigError(
            "RateLimitRegistry must be provided as a value (providers.register_value), "
            "not built by a factory"
        )
    if given is not None and given is not provider.value:
        raise ConfigError(
            "a RateLimitRegistry was given to the worker and provided through DI: keep one"
        )
    return provider.value


def actor_limits(
    given: RateLimitRegistry | None, providers: ProviderRegistry, actors: Iterable[ActorRef]
) -> dict[str, ActorLimits]:
    """Each actor's limits, resolved against the chosen registry (ConfigError otherwise)."""
    return choose_registry(given, providers).resolve(actors)


def definitions(plans: dict[str, ActorLimits], *, redis: bool) -> list[LimitDefinition]:
    """The distinct limits of every actor, as ``taskq top`` reads them (keyed when any actor
    uses the limit by key; rate limits in Redis when ``redis``)."""
    uses = [use for plan in plans.values() for use in (*plan.rate_limits, *plan.reservations)]
    keyed = {use.name for use in uses if use.key_fn is not None}
    found: dict[str, LimitDefinition] = {}
    for use in uses:
        limit = use.limit
        per_second = span = None
        if isinstance(limit, TokenBucket):
            per_second = limit.per_second
        elif isinstance(limit, SlidingWindow):
            span = limit.window
        in_redis = redis and not isinstance(limit, ConcurrencyReservation)
        found[limit.name] = LimitDefinition(
            limit.name,
            limit.kind,
            limit.capacity,
            per_second,
            span,
            keyed=limit.name in keyed,
            store="redis" if in_redis else "postgres",
        )
    return sorted(found.values(), key=lambda d: d.name)


async def start_limiter(
    plans: dict[str, ActorLimits],
    settings: TaskqSettings,
    backend: RateLimitBackend,
    *,
    clock: Clock,
    log: Any,
) -> RateLimiter | None:
    """The worker's limiter, its limits' definitions recorded for ``taskq top``, the caps of
    its queues read. Always made: a queue's max_concurrent may be set while the worker runs
    (the heartbeat reads the caps again). With no actor limit nothing is written and no Redis
    client opened, and a job outside a capped queue passes without a statement."""
    limited = any(plans.values())
    if limited:
        await backend.register_rate_limits(definitions(plans, redis=bool(settings.redis_url)))
    store = limiter_store(settings, backend, clock=clock, log=log) if limited else backend
    limiter = RateLimiter(plans, store, backend, clock=clock, lease=settings.lock_lease_delta)
    limiter.set_queue_caps(await backend.get_queue_caps(settings.queues))
    return limiter


async def close_limiter(limiter: RateLimiter | None) -> None:
    """Close the connections the limiter's store opened (Redis)."""
    if limiter is not None:
        await close_store(limiter.store)
