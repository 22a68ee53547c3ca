"""RedisLimiterStore: token buckets and sliding windows as Lua scripts on Redis.

Each script reads Redis's own clock (``TIME``), never a time the worker sends, so every
worker of a fleet shares one clock whatever its host's says (scripts are replicated by effect,
Redis >= 5). A bucket is a hash (tokens, last refill); a window a sorted set of use times in
microseconds. Keys carry a prefix (default ``taskq:<schema>:rl:``) and expire once idle long
enough to be full (bucket) or empty (window) again, so idle keys cost nothing.

Only a process that uses rate limits imports this module (and so the ``redis`` package).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from taskq_core.backend.protocol.ratelimit import (
    LimitDefinition,
    LimitGrant,
    LimitUsage,
    acquire_one_token,
    grants_of,
)

# KEYS[1] bucket; ARGV rate (tokens/s), burst, then each call's cost. Returns {granted,
# first_wait_s, tokens_left}: the tokens there go to the calls they cover, in order, up to the
# first call they do not cover; each other call gets the next place of the bucket's line (field
# `line`: the place after the last one given), its cost in refill intervals after the previous
# place and not before its tokens are there (first_wait_s is the first one's). The key lives
# until the bucket is full again and the line has ended.
_TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'line')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
local line = tonumber(state[3]) or 0
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
tokens = math.min(burst, tokens + math.max(now - at, 0) * rate)
local granted = 0
local denied = 0
local first = 0
for i = 3, #ARGV do
  local cost = tonumber(ARGV[i])
  if denied == 0 and cost <= tokens then
    tokens = tokens - cost
    granted = granted + 1
  else
    if denied == 0 then first = cost end
    denied = denied + cost
  end
end
local wait = 0
if denied > 0 then
  local place = math.max(line + (first - 1) / rate, now + (first - tokens) / rate)
  line = place + (denied - first + 1) / rate
  wait = place - now
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.12f', tokens),
           'at', string.format('%.6f', now), 'line', string.format('%.6f', line))
local rest = math.max((burst - tokens) / rate, line - now)
redis.call('PEXPIRE', KEYS[1], math.ceil(rest * 1000) + 1000)
return {granted, string.format('%.6f', wait), string.format('%.6f', tokens)}
"""

# KEYS[1] window (sorted set), KEYS[2] its use counter, KEYS[3] its line (the place after the
# last one given, microseconds); ARGV limit, window (microseconds), cost (uses).
# Returns {allowed, retry_after_us, free_left}. A call records its cost in uses, all or none.
# A denied call gets the next place of the line: cost times window/limit after the previous
# place, not before the last use that must leave for its uses to fit has left.
_SLIDING_WINDOW = """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = redis.call('ZCARD', KEYS[1])
local ttl = math.ceil(window / 1000) + 1000
if used + cost <= limit then
  local seq = redis.call('INCRBY', KEYS[2], cost)
  for i = 1, cost do
    redis.call('ZADD', KEYS[1], now, string.format('%.0f', now) .. '-' .. (seq - cost + i))
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {1, 0, limit - used - cost}
end
local index = used + cost - limit - 1
local blocking = redis.call('ZRANGE', KEYS[1], index, index, 'WITHSCORES')
local free_at = tonumber(blocking[2]) + window
local step = window / limit
local line = tonumber(redis.call('GET', KEYS[3]))
local place = free_at
if line then place = math.max(line + (cost - 1) * step, free_at) end
line = place + step
redis.call('SET', KEYS[3], string.format('%.0f', line),
           'PX', math.ceil((line - now) / 1000) + 1000)
return {0, string.format('%.0f', place - now), 0}
"""


def client_options(timeout: float) -> dict[str, Any]:
    """A client that fails fast: ``timeout`` seconds to connect or answer, and no retries of
    its own (the fallback store decides what an error means; redis-py's default would retry
    a refused connection with backoff for seconds while the job waits)."""
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
    }


def default_prefix(schema: str) -> str:
    """``taskq:<schema>:rl:``: two TaskQ schemas sharing one Redis never share a limit."""
    return f"taskq:{schema}:rl:"


class RedisLimiterStore:
    """The LimiterStore protocol on Redis (``redis.asyncio``)."""

    def __init__(self, client: Any, *, prefix: str) -> None:
        """Wrap a ``redis.asyncio.Redis`` client; prefer ``from_url``."""
        self.client = client
        self.prefix = prefix
        self._bucket = client.register_script(_TOKEN_BUCKET)
        self._window = client.register_script(_SLIDING_WINDOW)

    @classmethod
    def from_url(cls, url: str, *, prefix: str, timeout: float = 1.0) -> RedisLimiterStore:
        """A store on the Redis at ``url``; a call that waits longer than ``timeout`` seconds
        (to connect, or for an answer) fails, so a Redis that hangs never holds a job."""
        client = Redis.from_url(url, **client_options(timeout))
        return cls(client, prefix=prefix)

    def retarget(self, client: Any) -> None:
        """Use another client from now on (tests point one at a closed port)."""
        self.client = client
        self._bucket = client.register_script(_TOKEN_BUCKET)
        self._window = client.register_script(_SLIDING_WINDOW)

    acquire_token = acquire_one_token

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        """The calls' tokens from bucket ``key`` in one script run."""
        granted, wait, left = await self._bucket(
            keys=[f"{self.prefix}tb:{key}"], args=[repr(rate), repr(burst), *costs]
        )
        return grants_of(
            int(granted),
            costs,
            remaining=float(left),
            wait=timedelta(seconds=float(wait)),
            step=timedelta(seconds=1.0 / rate),
        )

    async def acquire_window(
        self, key: str, limit: int, window: timedelta, cost: int = 1
    ) -> LimitGrant:
        """``cost`` uses of window ``key`` (``limit`` per ``window``)."""
        micros = max(math.ceil(window.total_seconds() * 1_000_000), 1)
        keys = [f"{self.prefix}sw:{key}", f"{self.prefix}sq:{key}", f"{self.prefix}sl:{key}"]
        allowed, retry, left = await self._window(keys=keys, args=[limit, micros, cost])
        return LimitGrant(
            bool(int(allowed)), timedelta(microseconds=max(int(retry), 0)), float(left)
        )

    async def usage(
        self, limits: Sequence[LimitDefinition], instances_per_limit: int = 20
    ) -> list[LimitUsage]:
        """The use of these limits' instances now, on Redis's clock: tokens spent of the
        burst (refill counted), uses within the window; most used first per limit. A limit
        with no key in Redis (never used, or idle long enough to expire) has one row, used 0.
        """
        seconds, micros = await self.client.time()
        now = float(seconds) + float(micros) / 1_000_000
        usage: list[LimitUsage] = []
        for limit in limits:
            kind = "tb" if limit.kind == "token_bucket" else "sw"
            base = f"{self.prefix}{kind}:{limit.name}"
            keys = [base] if await self.client.exists(base) else []
            if limit.keyed:
                async for key in self.client.scan_iter(match=f"{base}:*", count=500):
                    keys.append(key)
                    if len(keys) >= 10 * instances_per_limit:
                        break  # enough to rank: a keyed limit may have thousands
            used = {key: await self._used(limit, key, now) for key in keys}
            ranked = sorted(used.items(), key=lambda item: (-item[1], item[0]))
            strip = len(self.prefix) + len(kind) + 1
            rows = [LimitUsage(limit, key[strip:], value) for key, value in ranked]
            usage += rows[:instances_per_limit] or [LimitUsage(limit, limit.name, 0.0)]
        return usage

    async def _used(self, limit: LimitDefinition, key: str, now: float) -> float:
        if limit.kind == "token_bucket":
            assert limit.per_second is not None
            tokens, at = await self.client.hmget(key, ["tokens", "at"])
            if tokens is None or at is None:
                return 0.0
            refilled = float(tokens) + limit.per_second * max(now - float(at), 0.0)
            return limit.capacity - min(limit.capacity, refilled)
        assert limit.span is not None
        since = (now - limit.span.total_seconds()) * 1_000_000
        return float(await self.client.zcount(key, f"({since:.0f}", "+inf"))

    async def close(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()
