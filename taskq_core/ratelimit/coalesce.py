"""TokenRequests: the admissions of one worker that ask the same bucket at once share one
store call.

A dispatch hands a worker's consumers several jobs of a limited actor together; each asking
for its token alone queued its statement on the bucket's one row behind the others' (a row
lock under PostgreSQL), the consumer slot idle meanwhile. Gathered, they are one statement
(``LimiterStore.acquire_tokens``) per bucket at a time per worker: the callers that ask while
one is out go together in the next.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from taskq_core.backend.protocol.ratelimit import LimiterStore, LimitGrant
from taskq_core.gathered import GatheredCalls

# Buckets past this many gatherers: the idle ones are dropped (keyed limits name many).
KEPT = 10_000

Take = tuple[float, float, int]  # a caller's rate, burst and cost


class TokenRequests:
    """Token takes of one worker, gathered per bucket."""

    def __init__(self, store: LimiterStore) -> None:
        self.store = store
        self._buckets: dict[str, GatheredCalls[Take, LimitGrant]] = {}

    async def take(self, key: str, rate: float, burst: float, cost: int = 1) -> LimitGrant:
        """``cost`` tokens of bucket ``key``, or the call's place in its line (as
        ``acquire_token``); raises what the store's call raised."""
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= KEPT:
                self._buckets = {k: b for k, b in self._buckets.items() if not b.idle}
            bucket = self._buckets[key] = GatheredCalls(self._caller(key), f"tokens:{key}")
        return await bucket.ask((rate, burst, cost))

    def _caller(self, key: str) -> Callable[[list[Take]], Awaitable[list[LimitGrant]]]:
        async def call(takes: list[Take]) -> list[LimitGrant]:
            rate, burst, _ = takes[0]  # the first caller's terms (one limit, one definition)
            costs = [cost for _, _, cost in takes]
            return await self.store.acquire_tokens(key, rate, burst, costs)

        return call
