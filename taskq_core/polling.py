"""A client's wait for a row to reach a state: read, look, sleep a growing interval."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from taskq_core.errors import JobNotFoundError

T = TypeVar("T")


async def poll_until(
    read: Callable[[], Awaitable[T | None]],
    done: Callable[[T], bool],
    *,
    missing: str,
    timeout: float | None,
    poll_interval: float,
) -> T:
    """Read until ``done`` says yes and return that row; JobNotFoundError(``missing``) when
    the row is gone, TimeoutError after ``timeout``. The interval grows by half each time,
    to 1 s (or ``poll_interval`` when longer)."""
    interval = poll_interval
    async with asyncio.timeout(timeout):
        while True:
            row = await read()
            if row is None:
                raise JobNotFoundError(missing)
            if done(row):
                return row
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, max(poll_interval, 1.0))
