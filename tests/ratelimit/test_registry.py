"""RateLimitRegistry resolves each actor's limits at start, refusing what cannot work with the
actor and the limit named; keyed limits name their key from the validated payload."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from taskq_core import (
    ConcurrencyReservation,
    KeyedRateLimitRef,
    KeyedReservationRef,
    RateLimitRegistry,
    SlidingWindow,
    TokenBucket,
    actor,
)
from taskq_core.errors import ConfigError
from taskq_core.ratelimit.registry import KeyFunctionError


class Charge(BaseModel):
    tenant: str
    amount: int = 1


@actor(rate_limits=["payments"])
async def charge(payload: Charge) -> None: ...


def test_an_unknown_limit_name_is_a_startup_error_naming_actor_and_limit() -> None:
    registry = RateLimitRegistry([TokenBucket("emails", 5)])
    with pytest.raises(ConfigError) as caught:
        registry.resolve([charge])
    message = str(caught.value)
    assert "actor 'charge'" in message
    assert "'payments', which is not a registered limit" in message
    assert "registered: emails" in message


def test_a_registered_name_resolves_for_every_actor_that_names_it() -> None:
    registry = RateLimitRegistry([TokenBucket("payments", 10)])
    plans = registry.resolve([charge])
    assert [use.limit for use in plans["charge"].rate_limits] == [TokenBucket("payments", 10)]
    assert plans["charge"].reservations == ()


def test_a_name_of_the_wrong_kind_is_refused() -> None:
    registry = RateLimitRegistry([ConcurrencyReservation("payments", 2)])
    with pytest.raises(ConfigError, match=r"actor 'charge': rate_limits names 'payments', a "):
        registry.resolve([charge])


def test_inline_limits_join_the_registry_and_may_be_named_by_others() -> None:
    @actor(rate_limits=[SlidingWindow("sms", 3, timedelta(minutes=1))])
    async def send(payload: Charge) -> None: ...

    @actor(rate_limits=["sms"])
    async def resend(payload: Charge) -> None: ...

    registry = RateLimitRegistry()
    plans = registry.resolve([resend, send])
    assert "sms" in registry
    assert plans["resend"].rate_limits[0].limit == SlidingWindow("sms", 3, timedelta(minutes=1))


def test_two_definitions_of_one_name_are_refused() -> None:
    @actor(rate_limits=[TokenBucket("api", 10)])
    async def first(payload: Charge) -> None: ...

    @actor(rate_limits=[TokenBucket("api", 20)])
    async def second(payload: Charge) -> None: ...

    with pytest.raises(ConfigError, match=r"actor 'second': limit 'api' is defined twice"):
        RateLimitRegistry().resolve([first, second])
    same = RateLimitRegistry([TokenBucket("api", 10)])
    same.register(TokenBucket("api", 10))  # the same definition again is fine
    with pytest.raises(ConfigError, match="defined twice"):
        same.register(TokenBucket("api", 11))


def test_keyed_limits_name_one_instance_per_key_from_the_validated_payload() -> None:
    per_tenant = KeyedRateLimitRef(TokenBucket("tenant", 5), lambda p: p.tenant, Charge)
    gpu = KeyedReservationRef("gpu", lambda p: f"pool-{p.amount}", Charge)

    @actor(rate_limits=[per_tenant], reservations=[gpu])
    async def bill(payload: Charge) -> None: ...

    registry = RateLimitRegistry([ConcurrencyReservation("gpu", 2)])
    plan = registry.resolve([bill])["bill"]
    assert plan.rate_limits[0].instance(Charge(tenant="acme")) == "tenant:acme"
    assert plan.rate_limits[0].instance({"tenant": "globex"}) == "tenant:globex"
    assert plan.reservations[0].instance(Charge(tenant="a", amount=3)) == "gpu:pool-3"


def test_a_key_function_that_raises_or_a_payload_that_does_not_fit_says_why() -> None:
    def broken(payload: Charge) -> str:
        raise LookupError("no tenant table")

    @actor(rate_limits=[KeyedRateLimitRef(TokenBucket("t", 1), broken, Charge)])
    async def bill(payload: dict) -> None: ...

    use = RateLimitRegistry().resolve([bill])["bill"].rate_limits[0]
    with pytest.raises(KeyFunctionError, match="key function of limit 't' raised LookupError"):
        use.instance({"tenant": "acme"})
    with pytest.raises(KeyFunctionError, match=r"payload does not fit Charge.*tenant"):
        use.instance({"amount": 3})


def test_an_actor_without_limits_resolves_to_nothing() -> None:
    @actor
    async def plain(payload: dict) -> None: ...

    assert not RateLimitRegistry().resolve([plain])["plain"]
