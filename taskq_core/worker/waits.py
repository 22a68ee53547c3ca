"""Waiting on several asyncio events at once, with an optional timeout (the loops' idle wait)."""

from __future__ import annotations

import asyncio


async def wait_any(*events: asyncio.Event, timeout: float | None = None) -> None:
    """Return as soon as any event is set, or after ``timeout`` seconds."""
    if any(event.is_set() for event in events):
        return
    if not events:
        await asyncio.sleep(timeout or 0)
        return
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
