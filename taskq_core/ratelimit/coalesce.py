"""TokenRequests: the admissions of one worker that ask the same bucket at once share one
store call.

A dispatch hands a worker's consumers several jobs of a limited actor together; each asking
for its token alone queued its statement on the bucket's one row behind the others' (a row
lock under PostgreSQL), the consumer slot idle meanwhile. Gathered, they are one statement
(``LimiterStore.acquire_tokens``) per bucket at a time per worker: the callers that ask while
one is out go together in the next.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from taskq_core.backend.protocol.ratelimit import LimiterStore, LimitGrant


@dataclass
class _Group:
    rate: float
    burst: float
    waiters: list[asyncio.Future[LimitGrant]] = field(default_factory=list)
    costs: list[int] = field(default_factory=list)  # each waiter's tokens


class TokenRequests:
    """Token takes of one worker, gathered per bucket."""

    def __init__(self, store: LimiterStore) -> None:
        self.store = store
        self._waiting: dict[str, _Group] = {}  # bucket -> the callers of its next call
        self._flushing: dict[str, asyncio.Task[None]] = {}  # bucket -> its call loop

    async def take(self, key: str, rate: float, burst: float, cost: int = 1) -> LimitGrant:
        """``cost`` tokens of bucket ``key``, or the call's place in its line (as
        ``acquire_token``); raises what the store's call raised."""
        group = self._waiting.get(key)
        if group is None:
            group = self._waiting[key] = _Group(rate, burst)
        waiter: asyncio.Future[LimitGrant] = asyncio.get_running_loop().create_future()
        group.waiters.append(waiter)
        group.costs.append(cost)
        if key not in self._flushing:
            self._flushing[key] = asyncio.create_task(self._flush(key), name=f"tokens:{key}")
        return await waiter

    async def _flush(self, key: str) -> None:
        """Call the store for the callers gathered, until none is left."""
        try:
            await asyncio.sleep(0)  # the consumers started in this tick ask first
            while (group := self._waiting.pop(key, None)) is not None:
                await self._call(key, group)
        finally:
            del self._flushing[key]
            stranded = self._waiting.pop(key, None)  # only when cancelled: nobody would ask
            for waiter in stranded.waiters if stranded is not None else ():
                waiter.cancel()

    async def _call(self, key: str, group: _Group) -> None:
        waiters = group.waiters
        try:
            grants = await self.store.acquire_tokens(key, group.rate, group.burst, group.costs)
        except Exception as exc:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        except BaseException:
            for waiter in waiters:
                waiter.cancel()
            raise
        for waiter, grant in zip(waiters, grants, strict=True):
            if not waiter.done():  # a caller cancelled meanwhile: its token goes unused
                waiter.set_result(grant)
