"""Retry policy and backoff math (pure), plus the control-flow exceptions actors raise.

The policy decides *whether* to retry and *how long* to wait; the backend decides *when* on its
own clock (``scheduled_at = now() + delay``) and whether a deadline has passed.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

RetryKind = Literal["transient", "indefinite", "non_retryable"]
Backoff = Literal["exponential", "linear", "fixed"]
# The application's own backoff: (the attempt that failed, 1-based; what it raised) -> delay.
DelayFunction = Callable[[int, BaseException], "timedelta | float"]


class RetryDelayError(Exception):
    """A RetryPolicy's ``delay`` function raised or returned something other than a delay."""


def _as_delta(value: timedelta | float | int) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=float(value))


@dataclass(frozen=True)
class RetryPolicy:
    """How an actor's failures are retried (see the worker guide, 'Retry and backoff').

    ``delay``, when given, replaces the built-in curve (``backoff``, ``base``, ``jitter``):
    called with the number of the attempt that failed (1-based, as the budget counts it) and
    the exception its body raised, it returns the wait (a timedelta or seconds) before the
    next one; TASKQ_MAX_RETRY_BACKOFF still caps it. ``kind`` and ``max_attempts`` still
    decide whether there is a next one.
    """

    kind: RetryKind = "transient"
    max_attempts: int = 3
    time_budget: timedelta | None = None
    backoff: Backoff = "exponential"
    base: timedelta = timedelta(seconds=5)
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.2
    delay: DelayFunction | None = None

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
        if self.delay is not None:
            _check_delay_function(self.delay)

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

    def curve_delay(
        self, attempt: int, *, max_retry_backoff: timedelta, rng: random.Random | None = None
    ) -> timedelta:
        """The built-in backoff after attempt ``attempt``: capped at min(cap,
        max_retry_backoff), jittered."""
        ceiling = min(self.cap, max_retry_backoff)
        try:
            raw = min(self.raw_delay(attempt), ceiling)
        except OverflowError:
            raw = ceiling
        spread = (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(raw * spread, ceiling)

    def next_delay(
        self,
        attempt: int,
        *,
        max_retry_backoff: timedelta,
        rng: random.Random | None = None,
        error: BaseException | None = None,
    ) -> timedelta | None:
        """The delay before the next attempt, or None when the job must fail now. With a
        ``delay`` function and the ``error`` the attempt raised, the function's answer
        (RetryDelayError when it raises or answers something else)."""
        if not self.should_retry(attempt):
            return None
        if self.delay is not None and error is not None:
            return min(_call_delay(self.delay, attempt, error), max_retry_backoff)
        return self.curve_delay(attempt, max_retry_backoff=max_retry_backoff, rng=rng)


def _check_delay_function(function: DelayFunction) -> None:
    """A ``delay`` function must be callable with (attempt, exception)."""
    if not callable(function):
        raise ValueError(f"RetryPolicy.delay must be a function, got {function!r}")
    try:
        inspect.signature(function).bind(1, Exception())
    except TypeError:
        raise ValueError(
            "RetryPolicy.delay must take (attempt, exception) and return a timedelta or seconds"
        ) from None
    except ValueError:  # a builtin without a signature: trusted
        pass


def _call_delay(function: DelayFunction, attempt: int, error: BaseException) -> timedelta:
    try:
        value = function(attempt, error)
    except Exception as exc:
        raise RetryDelayError(f"RetryPolicy.delay raised {type(exc).__name__}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise RetryDelayError(f"RetryPolicy.delay returned {value!r}, not a timedelta or seconds")
    try:
        return max(_as_delta(value), timedelta(0))
    except (ValueError, OverflowError):  # NaN, or more days than a timedelta holds
        raise RetryDelayError(f"RetryPolicy.delay returned {value!r}, not a delay") from None


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
