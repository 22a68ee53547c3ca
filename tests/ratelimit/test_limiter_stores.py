"""Token buckets and sliding windows behave the same on every limiter store: memory, PostgreSQL
and Redis. Counts are bounded by the time the store's own clock saw pass, never by timing."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from taskq_core.backend.protocol import LimitDefinition
from taskq_core.ratelimit.redis import RedisLimiterStore
from tests.ratelimit.conftest import LimiterTarget


async def test_a_token_bucket_admits_its_burst_then_the_refill_only(limiter: LimiterTarget) -> None:
    rate, burst = 2.0, 5.0
    started = await limiter.now()
    grants = [await limiter.store.acquire_token("api", rate, burst) for _ in range(20)]
    elapsed = await limiter.now() - started
    allowed = sum(grant.allowed for grant in grants)
    assert burst <= allowed <= burst + rate * elapsed
    denied = [grant for grant in grants if not grant.allowed]
    assert denied, "a burst of 5 cannot admit 20 calls at once"
    # The first denied call waits for the next token (one refill interval at most); each
    # later one takes the next place of the bucket's line, one interval further.
    assert timedelta(0) < denied[0].retry_after <= timedelta(seconds=1 / rate)
    assert denied[-1].retry_after > timedelta(seconds=(len(denied) - 1) / rate - elapsed)


async def test_denied_calls_take_places_one_interval_apart(limiter: LimiterTarget) -> None:
    rate = 1.0
    started = await limiter.now()
    assert (await limiter.store.acquire_token("api", rate, 1.0)).allowed
    waits = [(await limiter.store.acquire_token("api", rate, 1.0)).retry_after for _ in range(3)]
    elapsed = timedelta(seconds=await limiter.now() - started)
    # Places 1 s, 2 s and 3 s after the token was taken, whichever caller asks.
    for place, wait in enumerate(waits, start=1):
        assert timedelta(seconds=place) - elapsed <= wait <= timedelta(seconds=place)
    started = await limiter.now()
    assert (await limiter.store.acquire_window("sms", 2, timedelta(seconds=10))).allowed
    assert (await limiter.store.acquire_window("sms", 2, timedelta(seconds=10))).allowed
    waits = [
        (await limiter.store.acquire_window("sms", 2, timedelta(seconds=10))).retry_after
        for _ in range(3)
    ]
    elapsed = timedelta(seconds=await limiter.now() - started)
    # The first waits for the oldest use to leave (10 s), then one place per 5 s (10 s / 2).
    for place, wait in zip([10, 15, 20], waits, strict=True):
        assert timedelta(seconds=place) - elapsed <= wait <= timedelta(seconds=place)


async def test_a_line_that_ended_places_the_next_denial_at_the_next_token(
    movable_limiter: LimiterTarget,
) -> None:
    limiter = movable_limiter
    assert (await limiter.store.acquire_token("api", 1.0, 1.0)).allowed
    for _ in range(3):
        assert not (await limiter.store.acquire_token("api", 1.0, 1.0)).allowed
    await limiter.travel(10)  # every place passed; the bucket refilled its one token
    assert (await limiter.store.acquire_token("api", 1.0, 1.0)).allowed
    denied = await limiter.store.acquire_token("api", 1.0, 1.0)
    assert not denied.allowed
    assert timedelta(0) < denied.retry_after <= timedelta(seconds=1)


async def test_a_token_bucket_refills_at_its_rate(movable_limiter: LimiterTarget) -> None:
    limiter = movable_limiter
    while (await limiter.store.acquire_token("api", 1.0, 3.0)).allowed:
        pass
    await limiter.travel(2.0)  # two tokens' worth
    after = [(await limiter.store.acquire_token("api", 1.0, 3.0)).allowed for _ in range(4)]
    assert after[:2] == [True, True]
    assert after[3] is False


async def test_redis_bucket_refills(redis_limiter: LimiterTarget) -> None:
    limiter = redis_limiter
    rate = 50.0
    while (await limiter.store.acquire_token("fast", rate, 1.0)).allowed:
        pass
    # Waits on the state (a token comes back), bounded by a deadline, not a fixed sleep.
    async with asyncio.timeout(5):
        while not (await limiter.store.acquire_token("fast", rate, 1.0)).allowed:
            await asyncio.sleep(0.005)


async def test_buckets_of_different_keys_are_independent(limiter: LimiterTarget) -> None:
    assert (await limiter.store.acquire_token("tenant:a", 1.0, 1.0)).allowed
    assert not (await limiter.store.acquire_token("tenant:a", 1.0, 1.0)).allowed
    assert (await limiter.store.acquire_token("tenant:b", 1.0, 1.0)).allowed


async def test_a_sliding_window_admits_its_limit_within_the_window(limiter: LimiterTarget) -> None:
    window = timedelta(minutes=1)
    started = await limiter.now()
    grants = [await limiter.store.acquire_window("sms", 3, window) for _ in range(6)]
    assert await limiter.now() - started < window.total_seconds()
    assert [grant.allowed for grant in grants] == [True, True, True, False, False, False]
    for grant in grants[3:]:  # places of the line: a third of the window apart
        assert timedelta(0) < grant.retry_after <= window * 5 / 3


async def test_a_sliding_window_frees_an_entry_when_the_oldest_leaves(
    movable_limiter: LimiterTarget,
) -> None:
    limiter = movable_limiter
    window = timedelta(seconds=10)
    assert (await limiter.store.acquire_window("sms", 2, window)).allowed
    await limiter.travel(6)
    assert (await limiter.store.acquire_window("sms", 2, window)).allowed
    denied = await limiter.store.acquire_window("sms", 2, window)
    assert not denied.allowed
    assert timedelta(seconds=3) <= denied.retry_after <= timedelta(seconds=4.5)
    await limiter.travel(4.5)  # the first use left the window; the second has not
    assert (await limiter.store.acquire_window("sms", 2, window)).allowed
    assert not (await limiter.store.acquire_window("sms", 2, window)).allowed


async def test_redis_window_slides(redis_limiter: LimiterTarget) -> None:
    limiter = redis_limiter
    window = timedelta(milliseconds=100)
    assert (await limiter.store.acquire_window("burst", 1, window)).allowed
    denied = await limiter.store.acquire_window("burst", 1, window)
    assert not denied.allowed and denied.retry_after <= window
    async with asyncio.timeout(5):
        while not (await limiter.store.acquire_window("burst", 1, window)).allowed:
            await asyncio.sleep(0.005)


async def test_concurrent_acquires_never_exceed_the_window(limiter: LimiterTarget) -> None:
    window = timedelta(minutes=5)
    grants = await asyncio.gather(
        *(limiter.store.acquire_window("shared", 4, window) for _ in range(24))
    )
    assert sum(grant.allowed for grant in grants) == 4


async def test_concurrent_acquires_never_exceed_the_bucket(limiter: LimiterTarget) -> None:
    rate, burst = 0.5, 6.0
    started = await limiter.now()
    grants = await asyncio.gather(
        *(limiter.store.acquire_token("shared", rate, burst) for _ in range(30))
    )
    elapsed = await limiter.now() - started
    assert burst <= sum(grant.allowed for grant in grants) <= burst + rate * elapsed


async def test_contended_acquires_over_time_never_refill_twice(limiter: LimiterTarget) -> None:
    # Waves of concurrent acquirers over about a second: on PostgreSQL some wait for the
    # bucket's row lock and run after a later statement; a bucket that trusted their earlier
    # clock reading would credit the same interval twice.
    rate, burst = 20.0, 1.0
    started = await limiter.now()
    allowed = 0
    while await limiter.now() - started < 1.0:
        grants = await asyncio.gather(
            *(limiter.store.acquire_token("contended", rate, burst) for _ in range(16))
        )
        allowed += sum(grant.allowed for grant in grants)
        if limiter.clock is not None:
            limiter.clock.advance(0.05)
    elapsed = await limiter.now() - started
    assert allowed <= burst + rate * elapsed


async def test_redis_usage_reads_buckets_and_windows_on_its_clock(
    redis_limiter: LimiterTarget,
) -> None:
    store = redis_limiter.store
    assert isinstance(store, RedisLimiterStore)
    window = timedelta(minutes=1)
    api = LimitDefinition("api", "token_bucket", 10.0, per_second=0.5, store="redis")
    sms = LimitDefinition("sms", "sliding_window", 3.0, span=window, keyed=True, store="redis")
    idle = LimitDefinition("idle", "token_bucket", 2.0, per_second=1.0, store="redis")
    for _ in range(4):
        assert (await store.acquire_token("api", 0.5, 10.0)).allowed
    for key in ("sms:a", "sms:a", "sms:b"):
        assert (await store.acquire_window(key, 3, window)).allowed
    started = await redis_limiter.now()
    usage = await store.usage([api, sms, idle])
    elapsed = await redis_limiter.now() - started
    rows = {(u.limit.name, u.instance): u.used for u in usage}
    used_api = rows.pop(("api", "api"))
    assert used_api is not None and 4 - 0.5 * (elapsed + 1) <= used_api <= 4
    assert rows == {("sms", "sms:a"): 2.0, ("sms", "sms:b"): 1.0, ("idle", "idle"): 0.0}


async def test_many_calls_at_once_get_the_tokens_there_and_places_for_the_rest(
    limiter: LimiterTarget,
) -> None:
    rate, burst = 1.0, 3.0
    started = await limiter.now()
    grants = await limiter.store.acquire_tokens("api", rate, burst, [1] * 5)
    elapsed = timedelta(seconds=await limiter.now() - started)
    assert [grant.allowed for grant in grants] == [True, True, True, False, False]
    # The two left over wait for the next token (1 s) and the one after (2 s).
    for place, grant in zip([1, 2], grants[3:], strict=True):
        assert timedelta(seconds=place) - elapsed <= grant.retry_after <= timedelta(seconds=place)
    # The next call queues behind them, whichever caller makes it.
    later = await limiter.store.acquire_token("api", rate, burst)
    elapsed = timedelta(seconds=await limiter.now() - started)  # up to that call
    assert not later.allowed
    assert timedelta(seconds=3) - elapsed <= later.retry_after <= timedelta(seconds=3)
