"""Limits refuse bad definitions when they are made, naming the limit and the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from taskq_core import (
    ConcurrencyReservation,
    KeyedRateLimitRef,
    KeyedReservationRef,
    SlidingWindow,
    TokenBucket,
    actor,
)
from taskq_core.errors import ConfigError


class Charge(BaseModel):
    tenant: str


@pytest.mark.parametrize("rate", [0, -1, float("nan"), "10", True])
def test_token_bucket_refuses_a_rate_that_is_not_positive(rate: object) -> None:
    with pytest.raises(ConfigError, match=r"TokenBucket 'payments': rate must be"):
        TokenBucket("payments", rate)  # type: ignore[arg-type]


def test_token_bucket_burst_defaults_to_its_rate_and_at_least_one() -> None:
    assert TokenBucket("a", 10).capacity == 10
    assert TokenBucket("b", 0.5, per=timedelta(seconds=1)).capacity == 1
    assert TokenBucket("c", 10, burst=3).capacity == 3
    assert TokenBucket("d", 60, per=timedelta(minutes=1)).per_second == 1.0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TokenBucket("a", 1, burst=0.5), "burst must be at least 1"),
        (lambda: TokenBucket("a", 1, per=timedelta(0)), "per must be positive"),
        (lambda: SlidingWindow("w", 0, timedelta(seconds=1)), "limit must be positive"),
        (lambda: SlidingWindow("w", 2.5, timedelta(seconds=1)), "limit must be a whole number"),
        (lambda: SlidingWindow("w", 3, timedelta(0)), "window must be positive"),
        (lambda: ConcurrencyReservation("gpu", 0), "slots must be positive"),
        (lambda: TokenBucket("has:colon", 1), "no ':'"),
        (lambda: TokenBucket("", 1), "TokenBucket name ''"),
    ],
)
def test_bad_definitions_raise_one_clear_error(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def test_a_sliding_window_takes_seconds_for_its_window() -> None:
    assert SlidingWindow("w", 5, 60).window == timedelta(minutes=1)  # type: ignore[arg-type]


def test_keyed_refs_check_their_parts() -> None:
    with pytest.raises(ConfigError, match="key_fn must be callable"):
        KeyedRateLimitRef("payments", "tenant", Charge)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="payload_type must be a pydantic model"):
        KeyedRateLimitRef("payments", lambda p: p.tenant, dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="use KeyedReservationRef"):
        KeyedRateLimitRef(ConcurrencyReservation("gpu", 1), lambda p: p.tenant, Charge)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="use KeyedRateLimitRef"):
        KeyedReservationRef(TokenBucket("t", 1), lambda p: p.tenant, Charge)  # type: ignore[arg-type]


def test_actor_refuses_a_limit_of_the_wrong_kind_where_it_is_declared() -> None:
    with pytest.raises(ConfigError, match=r"actor 'charge': 'gpu' is a reservation"):

        @actor(rate_limits=[ConcurrencyReservation("gpu", 1)])
        async def charge(payload: Charge) -> None: ...

    with pytest.raises(ConfigError, match=r"actor 'render': 'payments' is a rate limit"):

        @actor(reservations=[TokenBucket("payments", 1)])
        async def render(payload: Charge) -> None: ...

    with pytest.raises(ConfigError, match=r"rate_limits entry 42 is not a limit name"):

        @actor(rate_limits=[42])
        async def other(payload: Charge) -> None: ...
