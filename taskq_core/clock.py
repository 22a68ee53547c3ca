"""Injectable time: SystemClock in production, FakeClock (stepped by hand) in tests.

Worker code never calls ``datetime.now()`` or ``time.monotonic()`` directly; it asks its clock.
Predicates on rows never use this clock at all: the database's clock owns them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall time for stamps, monotonic time for intervals."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clocks."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to.

    ``start`` is the first wall-clock reading and ``monotonic`` the first monotonic one.
    """

    def __init__(self, start: datetime | None = None, *, monotonic: float = 1000.0) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = monotonic

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, delta: timedelta | float) -> None:
        """Move both clocks forward by ``delta`` (seconds or a timedelta)."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
