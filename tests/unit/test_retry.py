from __future__ import annotations

import random
from datetime import timedelta

import pytest

from taskq_core.retry import RetryPolicy

HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [("exponential", [5, 10, 20, 40]), ("linear", [5, 10, 15, 20]), ("fixed", [5, 5, 5, 5])],
)
def test_backoff_formulas(backoff: str, expected: list[int]) -> None:
    policy = RetryPolicy(backoff=backoff, jitter=0.0, max_attempts=10)  # type: ignore[arg-type]
    delays = [policy.curve_delay(n, max_retry_backoff=HOUR).total_seconds() for n in range(1, 5)]
    assert delays == expected


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(jitter=0.2, max_attempts=10)
    rng = random.Random(7)
    for _ in range(200):
        seconds = policy.curve_delay(2, max_retry_backoff=HOUR, rng=rng).total_seconds()
        assert 8.0 <= seconds <= 12.0


def test_global_cap_wins_over_the_policy_cap() -> None:
    policy = RetryPolicy(cap=timedelta(days=365), jitter=0.0, max_attempts=100)
    assert policy.curve_delay(60, max_retry_backoff=timedelta(hours=24)) == timedelta(hours=24)


def test_transient_stops_at_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.next_delay(2, max_retry_backoff=HOUR) is not None
    assert policy.next_delay(3, max_retry_backoff=HOUR) is None


def test_indefinite_always_retries_and_non_retryable_never() -> None:
    assert RetryPolicy(kind="indefinite").next_delay(1000, max_retry_backoff=HOUR) is not None
    assert RetryPolicy(kind="non_retryable").next_delay(1, max_retry_backoff=HOUR) is None


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"jitter": 1.5}, {"kind": "sometimes"}, {"backoff": "random"}]
)
def test_invalid_policies_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
