"""Rate limits and concurrency reservations, enforced by the worker before an actor's body runs.

``primitives`` (TokenBucket, SlidingWindow, ConcurrencyReservation, the keyed refs), ``registry``
(RateLimitRegistry: named limits, each actor's resolved at start), ``gate`` (RateLimiter: the
admission of one job), and the limiter state stores: ``redis`` (Lua on Redis's clock),
``fallback`` (Redis, then PostgreSQL while Redis errors) and the backends themselves
(PostgreSQL on the server's clock, memory on the injected Clock). ``stores`` picks one from the
settings.
"""

from taskq_core.ratelimit.gate import queue_concurrency_reservation_name
from taskq_core.ratelimit.primitives import (
    ConcurrencyReservation,
    KeyedRateLimitRef,
    KeyedReservationRef,
    SlidingWindow,
    TokenBucket,
)
from taskq_core.ratelimit.registry import RateLimitRegistry, default_registry

__all__ = [
    "ConcurrencyReservation",
    "KeyedRateLimitRef",
    "KeyedReservationRef",
    "RateLimitRegistry",
    "SlidingWindow",
    "TokenBucket",
    "default_registry",
    "queue_concurrency_reservation_name",
]
