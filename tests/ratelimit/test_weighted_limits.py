"""Weighted rate limits as declared and admitted: a fixed cost is checked when the limit is
made (a cost the limit could never hold is refused), a computed one on each job's payload (a
price that could never be admitted fails the job, never hangs it); the cost is the declaring
actor's, so actors sharing a limit may each pay their own. Admission on the memory store and a
FakeClock: a weighted bucket or window admits its units per interval, and a denied job waits
for its own cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel

from taskq_core import (
    ConcurrencyReservation,
    KeyedRateLimitRef,
    RateLimitRegistry,
    SlidingWindow,
    TokenBucket,
    actor,
)
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.clock import FakeClock
from taskq_core.errors import ConfigError
from taskq_core.ratelimit.gate import Admission, Denial, RateLimiter
from taskq_core.ratelimit.registry import CostFunctionError, KeyFunctionError, LimitUse


class Prompt(BaseModel):
    tenant: str = "acme"
    tokens: Any = 1


OPENAI = TokenBucket("openai", 10, burst=10)


@pytest.mark.parametrize("cost", [0, -1, 1.5, "2", True])
def test_a_fixed_cost_must_be_a_positive_whole_number(cost: object) -> None:
    with pytest.raises(ConfigError, match=r"TokenBucket 'openai': cost must be"):
        TokenBucket("openai", 10, cost=cost)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"SlidingWindow 'sms': cost must be"):
        SlidingWindow("sms", 10, 60, cost=cost)  # type: ignore[arg-type]


def test_a_fixed_cost_above_the_capacity_is_refused_at_declaration() -> None:
    with pytest.raises(ConfigError, match=r"'openai': cost 11 exceeds the burst of 10"):
        TokenBucket("openai", 10, cost=11)
    with pytest.raises(ConfigError, match=r"'sms': cost 4 exceeds the limit of 3"):
        SlidingWindow("sms", 3, timedelta(minutes=1), cost=4)
    with pytest.raises(ConfigError, match=r"cost 3 exceeds the burst of 2"):
        OPENAI.__class__("openai", 10, burst=2).with_cost(3)
    assert TokenBucket("openai", 10, cost=10).cost == 10  # the whole burst is fine


def test_a_reservation_takes_no_cost() -> None:
    with pytest.raises(TypeError, match="cost"):
        ConcurrencyReservation("gpu", 4, cost=2)  # type: ignore[call-arg]


def test_actors_sharing_a_limit_each_pay_their_own_cost() -> None:
    @actor(rate_limits=[OPENAI.with_cost(4)])
    async def chat(payload: Prompt) -> None: ...

    @actor(rate_limits=["openai"])
    async def ping(payload: Prompt) -> None: ...

    @actor(rate_limits=[OPENAI.with_cost(lambda p: p.tokens)])
    async def complete(payload: Prompt) -> None: ...

    registry = RateLimitRegistry()
    plans = registry.resolve([chat, ping, complete])  # one definition, three costs
    assert registry.get("openai") == OPENAI
    [chat_use], [ping_use], [complete_use] = (plans[n].rate_limits for n in plans)
    assert (chat_use.cost, chat_use.cost_fn) == (4, None)
    assert (ping_use.cost, ping_use.cost_fn) == (1, None)
    assert complete_use.units(Prompt(tokens=7)) == 7

    # A different definition under the name is still refused, cost or not.
    @actor(rate_limits=[TokenBucket("openai", 20, cost=2)])
    async def other(payload: Prompt) -> None: ...

    with pytest.raises(ConfigError, match="'openai' is defined twice"):
        RateLimitRegistry().resolve([chat, other])


def test_a_keyed_limit_takes_its_templates_cost() -> None:
    per_tenant = TokenBucket("per_tenant", 5, cost=lambda p: p.tokens)

    @actor(rate_limits=[KeyedRateLimitRef(per_tenant, lambda p: p.tenant, Prompt)])
    async def chat(payload: Prompt) -> None: ...

    [use] = RateLimitRegistry().resolve([chat])["chat"].rate_limits
    payload = Prompt(tenant="acme", tokens=3)
    assert (use.instance(payload), use.units(payload)) == ("per_tenant:acme", 3)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (11, r"cost 11 exceeds the capacity of limit 'openai' \(token bucket 10/1s, burst 10\)"),
        (-1, r"returned -1, not a whole number of 0 or more"),
        (2.5, r"returned 2.5, not a whole number"),
        ("3", r"returned '3', not a whole number"),
        (None, r"returned None, not a whole number"),
    ],
)
def test_a_computed_cost_that_could_never_be_admitted_is_an_error(
    tokens: object, message: str
) -> None:
    use = LimitUse(OPENAI, cost_fn=lambda p: p.tokens)
    with pytest.raises(CostFunctionError, match=message) as caught:
        use.units(Prompt(tokens=tokens))
    assert isinstance(caught.value, KeyFunctionError)  # the job fails like an unkeyed one
    assert caught.value.error_class == "RateLimitCostError"


def test_a_computed_cost_is_a_whole_number_from_zero_to_the_capacity() -> None:
    use = LimitUse(OPENAI, cost_fn=lambda p: p.tokens)
    assert [use.units(Prompt(tokens=n)) for n in (0, 1, 10, 4.0)] == [0, 1, 10, 4]


def test_a_cost_function_that_raises_names_the_limit_and_the_error() -> None:
    use = LimitUse(OPENAI, cost_fn=lambda p: p["missing"])
    with pytest.raises(CostFunctionError, match=r"cost function of limit 'openai' raised"):
        use.units({})


@actor(rate_limits=[OPENAI.with_cost(lambda p: p.tokens)])
async def complete(payload: Prompt) -> None: ...


@actor(rate_limits=[SlidingWindow("sms", 6, timedelta(seconds=1), cost=3)])
async def broadcast(payload: dict[str, Any]) -> None: ...


def limiter(*actors: Any) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    plans = RateLimitRegistry().resolve(actors)
    return RateLimiter(plans, store, store, clock=clock, lease=timedelta(minutes=1)), clock


async def admit(gate: RateLimiter, name: str, payload: Any) -> Admission | Denial:
    return await gate.admit(name, payload, uuid4(), uuid4(), "default")


async def test_a_weighted_bucket_admits_its_units_per_interval() -> None:
    gate, clock = limiter(complete)
    admitted, started = 0, clock.monotonic()
    while clock.monotonic() - started < 5:  # each denied job comes back when it was told
        verdict = await admit(gate, "complete", Prompt(tokens=4))
        if isinstance(verdict, Denial):
            clock.advance(verdict.retry_after)
        else:
            admitted += 1
    elapsed = clock.monotonic() - started
    # 10 tokens at once, then 10 a second, in jobs of 4: the refill is used to the last job.
    assert 10 + 10 * elapsed - 4 <= admitted * 4 <= 10 + 10 * elapsed


async def test_a_denied_job_waits_for_its_own_cost() -> None:
    gate, clock = limiter(complete)
    assert isinstance(await admit(gate, "complete", Prompt(tokens=8)), Admission)
    denied = await admit(gate, "complete", Prompt(tokens=6))  # 2 there, 4 more at 10/s
    assert isinstance(denied, Denial) and denied.reason == "rate_limit:openai"
    assert denied.retry_after == timedelta(seconds=0.4)
    clock.advance(0.4)
    assert isinstance(await admit(gate, "complete", Prompt(tokens=6)), Admission)
    free = await admit(gate, "complete", Prompt(tokens=0))  # a cost of 0 asks nothing
    assert isinstance(free, Admission)


async def test_a_weighted_window_admits_its_units_within_the_window() -> None:
    gate, clock = limiter(broadcast)
    verdicts = [await admit(gate, "broadcast", {}) for _ in range(3)]
    assert [type(v) for v in verdicts] == [Admission, Admission, Denial]  # 3 + 3 of 6
    denied = verdicts[2]
    assert isinstance(denied, Denial) and denied.retry_after == timedelta(seconds=1)
    clock.advance(1)
    assert isinstance(await admit(gate, "broadcast", {}), Admission)


async def test_a_computed_cost_error_holds_nothing() -> None:
    @actor(
        rate_limits=[OPENAI.with_cost(lambda p: p.tokens)],
        reservations=[ConcurrencyReservation("gpu", 1)],
    )
    async def guarded(payload: Prompt) -> None: ...

    gate, _ = limiter(guarded)
    with pytest.raises(CostFunctionError):
        await admit(gate, "guarded", Prompt(tokens=50))
    assert gate.holding() == []
    assert isinstance(await admit(gate, "guarded", Prompt(tokens=1)), Admission)
