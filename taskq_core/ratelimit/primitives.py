"""The limits an actor declares: TokenBucket, SlidingWindow, ConcurrencyReservation, and their
keyed forms (KeyedRateLimitRef, KeyedReservationRef) that make one limit per payload key.

Each is a frozen value checked when it is made: a non-positive rate, limit, window or slot
count, or a name that is not a plain word, raises ConfigError naming the limit. Two primitives
with the same name are one limit: the registry refuses two different definitions of a name.
A rate limit's ``cost`` (the units one job takes) is the declaring actor's, not the limit's:
the registry keeps the limit without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel

from taskq_core.errors import ConfigError

# Limit names become Redis keys and row keys; a keyed limit's key follows a colon.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
LimitKind = Literal["token_bucket", "sliding_window", "reservation"]


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(
            f"{kind} name {name!r}: use 1-100 letters, digits, '_', '-' or '.' (no ':')"
        )
    return name


def _positive_number(what: str, value: object, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what}: {label} must be a number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{what}: {label} must be positive, got {value!r}")
    return float(value)


def _positive_int(what: str, value: object, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what}: {label} must be a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{what}: {label} must be positive, got {value!r}")
    return value


def _positive_duration(what: str, value: object, label: str) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise ConfigError(f"{what}: {label} must be a timedelta or seconds, got {value!r}")
    if value <= timedelta(0):
        raise ConfigError(f"{what}: {label} must be positive, got {value}")
    return value


Cost = int | Callable[[Any], object]


def _check_cost(what: str, cost: object, capacity: float, label: str) -> None:
    """A fixed cost is a whole number from 1 to the capacity (a job costing more could never
    be admitted); a callable is checked on each job's payload instead."""
    if callable(cost):
        return
    _positive_int(what, cost, "cost")
    assert isinstance(cost, int)
    if cost > capacity:
        raise ConfigError(
            f"{what}: cost {cost} exceeds the {label} of {capacity:g}: "
            "a job costing more than the limit ever holds could never run"
        )


# The three kinds of limit share one shape on purpose (name, numbers, ``kind``, checks in
# ``__post_init__``, ``capacity``, ``describe``): the registry and the stores read any of them.
@dataclass(frozen=True)
class TokenBucket:
    """At most ``rate`` calls per ``per`` on average, with bursts of up to ``burst`` calls
    (default: ``rate``, at least 1). The bucket starts full and refills continuously.

    ``cost``: the tokens one job of the declaring actor takes, a whole number up to the burst,
    or a function of the job's payload that returns one (0 takes nothing)."""

    name: str
    rate: float
    per: timedelta = timedelta(seconds=1)
    burst: float | None = None
    cost: Cost = field(default=1, kw_only=True)

    kind: LimitKind = field(default="token_bucket", init=False, repr=False)

    def __post_init__(self) -> None:
        what = f"TokenBucket {_check_name('TokenBucket', self.name)!r}"
        rate = _positive_number(what, self.rate, "rate")
        per = _positive_duration(what, self.per, "per")
        burst = max(rate, 1.0) if self.burst is None else self.burst
        burst = _positive_number(what, burst, "burst")
        if burst < 1:
            raise ConfigError(f"{what}: burst must be at least 1, got {self.burst!r}")
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "per", per)
        object.__setattr__(self, "burst", burst)
        _check_cost(what, self.cost, burst, "burst")

    @property
    def capacity(self) -> float:
        """The burst: tokens a full bucket holds."""
        assert self.burst is not None  # set in __post_init__
        return self.burst

    @property
    def per_second(self) -> float:
        """Tokens the bucket gains each second."""
        return self.rate / self.per.total_seconds()

    def with_cost(self, cost: Cost) -> TokenBucket:
        """This bucket, each job taking ``cost`` tokens (a number or a function of the
        payload): ``rate_limits=[OPENAI.with_cost(10)]``."""
        return replace(self, cost=cost)

    def describe(self) -> str:
        """``token bucket 10/1s, burst 10``."""
        return f"token bucket {self.rate:g}/{_span(self.per)}, burst {self.capacity:g}"


@dataclass(frozen=True)
class SlidingWindow:
    """At most ``limit`` calls within any ``window`` (seconds or a timedelta).

    ``cost``: the uses one job of the declaring actor counts for, a whole number up to the
    limit, or a function of the job's payload that returns one (0 counts nothing)."""

    name: str
    limit: int
    window: timedelta
    cost: Cost = field(default=1, kw_only=True)

    kind: LimitKind = field(default="sliding_window", init=False, repr=False)

    def __post_init__(self) -> None:
        what = f"SlidingWindow {_check_name('SlidingWindow', self.name)!r}"
        _positive_int(what, self.limit, "limit")
        object.__setattr__(self, "window", _positive_duration(what, self.window, "window"))
        _check_cost(what, self.cost, self.limit, "limit")

    @property
    def capacity(self) -> float:
        """Calls the window admits."""
        return float(self.limit)

    def with_cost(self, cost: Cost) -> SlidingWindow:
        """This window, each job counting as ``cost`` uses (see TokenBucket.with_cost)."""
        return replace(self, cost=cost)

    def describe(self) -> str:
        """``sliding window 100 per 1m``."""
        return f"sliding window {self.limit} per {_span(self.window)}"


@dataclass(frozen=True)
class ConcurrencyReservation:
    """At most ``slots`` jobs holding this reservation run at once, across every worker.
    Each job holds one slot: a reservation takes no cost."""

    name: str
    slots: int

    kind: LimitKind = field(default="reservation", init=False, repr=False)

    def __post_init__(self) -> None:
        what = f"ConcurrencyReservation {_check_name('ConcurrencyReservation', self.name)!r}"
        _positive_int(what, self.slots, "slots")

    @property
    def capacity(self) -> float:
        """Slots of the reservation."""
        return float(self.slots)

    def describe(self) -> str:
        """``reservation of 4 slots``."""
        return f"reservation of {self.slots} slot{'' if self.slots == 1 else 's'}"


RateLimit = TokenBucket | SlidingWindow

Limit = TokenBucket | SlidingWindow | ConcurrencyReservation


def unweighted(limit: Limit) -> Limit:
    """``limit`` as the registry keeps it: the definition without a declaring actor's cost."""
    if isinstance(limit, ConcurrencyReservation) or limit.cost == 1:
        return limit
    return replace(limit, cost=1)


@dataclass(frozen=True)
class KeyedRateLimitRef:
    """One rate limit per key: ``limit`` (a registered name, or a TokenBucket/SlidingWindow)
    is the template, and each job's ``key_fn(payload)`` picks its own bucket or window,
    named ``<limit>:<key>``. ``payload_type`` is the model ``key_fn`` receives: the job's
    payload is validated against it first."""

    limit: str | TokenBucket | SlidingWindow
    key_fn: Callable[[Any], object]
    payload_type: type[BaseModel]

    def __post_init__(self) -> None:
        _check_keyed("KeyedRateLimitRef", self.limit, self.key_fn, self.payload_type)
        if isinstance(self.limit, ConcurrencyReservation):
            raise ConfigError(
                f"KeyedRateLimitRef: {self.limit.name!r} is a ConcurrencyReservation "
                "(use KeyedReservationRef)"
            )

    @property
    def name(self) -> str:
        """The template's name."""
        return self.limit if isinstance(self.limit, str) else self.limit.name


@dataclass(frozen=True)
class KeyedReservationRef:
    """One reservation per key: ``reservation`` (a registered name or a
    ConcurrencyReservation) is the template; see KeyedRateLimitRef."""

    reservation: str | ConcurrencyReservation
    key_fn: Callable[[Any], object]
    payload_type: type[BaseModel]

    def __post_init__(self) -> None:
        _check_keyed("KeyedReservationRef", self.reservation, self.key_fn, self.payload_type)
        if isinstance(self.reservation, TokenBucket | SlidingWindow):
            raise ConfigError(
                f"KeyedReservationRef: {self.reservation.name!r} is a rate limit "
                "(use KeyedRateLimitRef)"
            )

    @property
    def name(self) -> str:
        """The template's name."""
        if isinstance(self.reservation, str):
            return self.reservation
        return self.reservation.name


def _check_keyed(kind: str, template: object, key_fn: object, payload_type: object) -> None:
    if isinstance(template, str):
        _check_name(kind, template)
    elif not isinstance(template, TokenBucket | SlidingWindow | ConcurrencyReservation):
        raise ConfigError(f"{kind}: the template must be a limit name or a limit, not {template!r}")
    if not callable(key_fn):
        raise ConfigError(f"{kind} {template!r}: key_fn must be callable")
    if not (isinstance(payload_type, type) and issubclass(payload_type, BaseModel)):
        raise ConfigError(f"{kind} {template!r}: payload_type must be a pydantic model class")


RateLimitEntry = str | TokenBucket | SlidingWindow | KeyedRateLimitRef
ReservationEntry = str | ConcurrencyReservation | KeyedReservationRef


def check_declarations(
    actor: str, rate_limits: Iterable[object], reservations: Iterable[object]
) -> None:
    """Refuse an entry of the wrong kind in ``@actor(rate_limits=..., reservations=...)``."""
    for entry in rate_limits:
        if isinstance(entry, ConcurrencyReservation | KeyedReservationRef):
            raise ConfigError(
                f"actor {actor!r}: {entry.name!r} is a reservation; declare it in reservations="
            )
        if not isinstance(entry, str | TokenBucket | SlidingWindow | KeyedRateLimitRef):
            raise ConfigError(
                f"actor {actor!r}: rate_limits entry {entry!r} is not a limit name, "
                "TokenBucket, SlidingWindow or KeyedRateLimitRef"
            )
    for entry in reservations:
        if isinstance(entry, TokenBucket | SlidingWindow | KeyedRateLimitRef):
            raise ConfigError(
                f"actor {actor!r}: {entry.name!r} is a rate limit; declare it in rate_limits="
            )
        if not isinstance(entry, str | ConcurrencyReservation | KeyedReservationRef):
            raise ConfigError(
                f"actor {actor!r}: reservations entry {entry!r} is not a reservation name, "
                "ConcurrencyReservation or KeyedReservationRef"
            )


def _span(delta: timedelta) -> str:
    """``1s``, ``1.5s``, ``1m``, ``1h`` for the descriptions."""
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
