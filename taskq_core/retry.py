"""Retry policy and backoff math (pure), plus the control-flow exceptions actors raise.

The policy decides *whether* to retry and *how long* to wait; the backend decides *when* on its
own clock (``scheduled_at = now() + delay``) and whether a deadline has passed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

RetryKind = Literal["transient", "indefinite", "non_retryable"]
Backoff = Literal["exponential", "linear", "fixed"]


def _as_delta(value: timedelta | float | int) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=float(value))


@dataclass(frozen=True)
class RetryPolicy:
    """How an actor's failures are retried (see the worker guide, 'Retry and backoff')."""

    kind: RetryKind = "transient"
    max_attempts: int = 3
    time_budget: timedelta | None = None
    backoff: Backoff = "exponential"
    base: timedelta = timedelta(seconds=5)
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("transient", "indefinite", "non_retryable"):
            raise ValueError("RetryPolicy.kind must be transient, indefinite or non_retryable")
        if self.backoff not in ("exponential", "linear", "fixed"):
            raise ValueError("RetryPolicy.backoff must be exponential, linear or fixed")
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter must be within [0, 1]")
        for name in ("base", "cap"):
            object.__setattr__(self, name, _as_delta(getattr(self, name)))
        if self.time_budget is not None:
            object.__setattr__(self, "time_budget", _as_delta(self.time_budget))

    def should_retry(self, attempt: int) -> bool:
        """Whether a failure of attempt number ``attempt`` (1-based) gets another try.

        ``indefinite`` always says yes: its limit is the job's deadline, enforced by the backend.
        """
        if self.kind == "non_retryable":
            return False
        if self.kind == "transient":
            return attempt < self.max_attempts
        return True

    def raw_delay(self, attempt: int) -> timedelta:
        """The un-jittered backoff after attempt ``attempt`` (1-based)."""
        n = max(attempt, 1)
        if self.backoff == "exponential":
            factor: int = 2 ** min(n - 1, 62)
            return self.base * factor
        if self.backoff == "linear":
            return self.base * n
        return self.base

    def delay(
        self, attempt: int, *, max_retry_backoff: timedelta, rng: random.Random | None = None
    ) -> timedelta:
        """Backoff after attempt ``attempt``: capped at min(cap, max_retry_backoff), jittered."""
        ceiling = min(self.cap, max_retry_backoff)
        try:
            raw = min(self.raw_delay(attempt), ceiling)
        except OverflowError:
            raw = ceiling
        spread = (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(raw * spread, ceiling)

    def next_delay(
        self, attempt: int, *, max_retry_backoff: timedelta, rng: random.Random | None = None
    ) -> timedelta | None:
        """The delay before the next attempt, or None when the job must fail now."""
        if not self.should_retry(attempt):
            return None
        return self.delay(attempt, max_retry_backoff=max_retry_backoff, rng=rng)


DEFAULT_RETRY_POLICY = RetryPolicy()


def retries_left(
    retry_kind: str,
    attempt: int,
    max_attempts: int,
    schedule_to_close: datetime | None,
    now: datetime,
) -> bool:
    """Whether a job that crashed or was given back after ``attempt`` may run again.

    The one statement of the rule for backend-side retries (a reclaim, a release): transient
    jobs while attempts remain, indefinite ones until their deadline, non_retryable never.
    The SQL settle statement states the same predicate (``settle`` in ``settle.sql``); the
    differential test holds the two together.
    """
    if retry_kind == "transient":
        return attempt < max_attempts
    if retry_kind == "indefinite":
        return schedule_to_close is None or schedule_to_close > now
    return False


class Snooze(Exception):
    """Raised by an actor: run me again after ``delay``, without using up an attempt."""

    def __init__(self, delay: timedelta | float) -> None:
        self.delay = _as_delta(delay)
        super().__init__(f"snooze {self.delay}")


class RetryAfter(Exception):
    """Raised by an actor: retry after ``delay``; ``consume_budget`` counts it as an attempt."""

    def __init__(self, delay: timedelta | float, *, consume_budget: bool = True) -> None:
        self.delay = _as_delta(delay)
        self.consume_budget = consume_budget
        super().__init__(f"retry after {self.delay}")
