"""Actors of the rate-limit end-to-end tests (`taskq worker --actors
tests.e2e.ratelimit_actors:registry`)."""

from __future__ import annotations

import asyncio
from typing import Any

from taskq_core import ConcurrencyReservation, JobContext, actor

SOLO = ConcurrencyReservation("e2e_solo", 1)


@actor(reservations=[SOLO])
async def hold_slot(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> int:
    """Holds the one slot for ``seconds`` on its first attempt; returns at once after that."""
    if ctx.attempt == 1:
        try:
            await asyncio.wait_for(ctx.cancel_event.wait(), payload.get("seconds", 60))
        except TimeoutError:
            pass
    return ctx.attempt


@actor(reservations=[SOLO])
async def use_slot(payload: dict[str, Any]) -> str:
    """Needs the same slot briefly."""
    return "used"


registry = [hold_slot, use_slot]
