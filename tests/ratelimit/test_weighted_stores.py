"""Weighted calls (a cost of several tokens or window uses) behave the same on every limiter
store: memory, PostgreSQL and Redis. A call takes its whole cost or nothing; denied, it waits
for its own cost, and the line moves on by it. Waits are bounded by the time the store's own
clock saw pass, never by timing."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.ratelimit.conftest import LimiterTarget


def near(wait: timedelta, seconds: float, elapsed: float) -> bool:
    """``wait`` is ``seconds`` as seen ``elapsed`` seconds of the store's clock after it."""
    return timedelta(seconds=seconds - elapsed) <= wait <= timedelta(seconds=seconds)


async def test_a_call_takes_its_cost_of_tokens_or_none(limiter: LimiterTarget) -> None:
    store, rate, burst = limiter.store, 1.0, 10.0
    started = await limiter.now()
    first = await store.acquire_token("api", rate, burst, cost=4)
    assert first.allowed and first.remaining == 6.0
    assert (await store.acquire_token("api", rate, burst, cost=4)).allowed
    big = await store.acquire_token("api", rate, burst, cost=4)  # two tokens left
    small = await store.acquire_token("api", rate, burst, cost=1)  # finds its token
    later = await store.acquire_token("api", rate, burst, cost=2)
    elapsed = await limiter.now() - started
    assert not big.allowed and small.allowed and not later.allowed
    # The 4 waits for the two tokens it lacks; the 2 takes the next place: two intervals
    # after the 4's.
    assert near(big.retry_after, 2.0, elapsed)
    assert near(later.retry_after, 4.0, elapsed)


async def test_calls_at_once_are_granted_in_order_up_to_the_first_not_covered(
    limiter: LimiterTarget,
) -> None:
    started = await limiter.now()
    grants = await limiter.store.acquire_tokens("api", 1.0, 10.0, [3, 3, 5, 1])
    elapsed = await limiter.now() - started
    # The 1 would fit the four tokens left, but the 5 asked first: it waits behind it.
    assert [grant.allowed for grant in grants] == [True, True, False, False]
    assert grants[1].remaining is not None and 4.0 <= grants[1].remaining < 4.1
    assert near(grants[2].retry_after, 1.0, elapsed)  # the one token the 5 lacks
    assert near(grants[3].retry_after, 2.0, elapsed)  # one more interval: its own cost
    # A new bucket seeded by such a call counts only what it granted.
    seeded = await limiter.store.acquire_tokens("fresh", 1.0, 10.0, [6, 6])
    assert [grant.allowed for grant in seeded] == [True, False]
    assert seeded[0].remaining == 4.0


async def test_a_window_records_a_calls_cost_in_uses_or_none(limiter: LimiterTarget) -> None:
    store, window = limiter.store, timedelta(seconds=10)
    started = await limiter.now()
    assert (await store.acquire_window("sms", 5, window, cost=3)).allowed
    big = await store.acquire_window("sms", 5, window, cost=3)  # two uses free
    fits = await store.acquire_window("sms", 5, window, cost=2)
    one = await store.acquire_window("sms", 5, window, cost=1)
    elapsed = await limiter.now() - started
    assert not big.allowed and fits.allowed and not one.allowed
    # The 3 waits for the first call's uses to leave (10 s); the 1 takes the next place, one
    # step (10 s / 5) after it.
    assert near(big.retry_after, 10.0, elapsed)
    assert near(one.retry_after, 12.0, elapsed)


async def test_a_weighted_call_waits_until_enough_uses_left_the_window(
    movable_limiter: LimiterTarget,
) -> None:
    limiter, window = movable_limiter, timedelta(seconds=10)
    assert (await limiter.store.acquire_window("sms", 4, window, cost=2)).allowed
    await limiter.travel(5)
    assert (await limiter.store.acquire_window("sms", 4, window, cost=2)).allowed
    denied = await limiter.store.acquire_window("sms", 4, window, cost=3)
    assert not denied.allowed
    # Three uses must be free: the third oldest (the second call's) leaves in 10 s.
    assert timedelta(seconds=9.5) <= denied.retry_after <= timedelta(seconds=10)
    await limiter.travel(5.5)  # the first call's two uses left; the second's have not
    assert not (await limiter.store.acquire_window("sms", 4, window, cost=3)).allowed
    assert (await limiter.store.acquire_window("sms", 4, window, cost=2)).allowed


async def test_a_weighted_call_waits_for_its_tokens_to_refill(
    movable_limiter: LimiterTarget,
) -> None:
    limiter = movable_limiter
    assert (await limiter.store.acquire_token("api", 1.0, 5.0, cost=5)).allowed
    await limiter.travel(3)
    denied = await limiter.store.acquire_token("api", 1.0, 5.0, cost=4)
    assert not denied.allowed
    assert timedelta(seconds=0.5) <= denied.retry_after <= timedelta(seconds=1)
    await limiter.travel(1)
    assert (await limiter.store.acquire_token("api", 1.0, 5.0, cost=4)).allowed


async def test_concurrent_weighted_calls_never_exceed_the_bucket_or_window(
    limiter: LimiterTarget,
) -> None:
    grants = await asyncio.gather(
        *(limiter.store.acquire_token("shared", 0.001, 10.0, cost=3) for _ in range(12))
    )
    assert sum(grant.allowed for grant in grants) == 3  # 9 of 10 tokens; the refill is nil
    window = timedelta(minutes=5)
    uses = await asyncio.gather(
        *(limiter.store.acquire_window("shared", 5, window, cost=2) for _ in range(12))
    )
    # Never more than the 5 uses. On PostgreSQL, acquirers that each locked part of the free
    # entries may all be denied (they come back at their place in the line).
    assert 2 * sum(grant.allowed for grant in uses) <= 5
