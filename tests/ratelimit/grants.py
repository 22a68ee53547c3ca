"""What a rate limiter granted, as the worker asked: each grant bracketed by the wall clock
around its call, so a test judges a window by the admissions themselves, not by the jobs'
start marks (written in batches, late under load)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from taskq_core.backend.protocol import Backend, LimitGrant

Grant = tuple[datetime, datetime, int]  # a granted acquire: called at, returned at, units


def record_grants(backend: Backend) -> list[Grant]:
    """Every window use the limiter grants, bracketed by the wall clock around its call (the
    database's clock on this host is the same clock): the admission happened in between."""
    grants: list[Grant] = []
    acquire = backend.acquire_window

    async def recorded(key: str, limit: int, window: timedelta, cost: int = 1) -> LimitGrant:
        called = datetime.now(UTC)
        grant = await acquire(key, limit, window, cost)
        if grant.allowed:
            grants.append((called, datetime.now(UTC), cost))
        return grant

    backend.acquire_window = recorded  # type: ignore[method-assign]
    return grants


def most_units_surely_in_one_window(grants: list[Grant], window: timedelta) -> int:
    """The most units granted by calls that all ran within one ``window`` from the first one's
    call to the last one's return: those admissions surely fell in one window, however late
    their jobs' start marks were written."""
    return max(
        sum(
            units
            for called, returned, units in grants
            if called >= first and returned - first < window
        )
        for first, _, _ in grants
    )
