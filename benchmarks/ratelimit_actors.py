"""Actors of the rate-limit benchmark (``--actors benchmarks.ratelimit_actors:registry``)."""

from __future__ import annotations

from typing import Any

from taskq_core import TokenBucket, actor

BUCKET = TokenBucket("bench_api", 100)  # 100 starts a second across the fleet, bursts of 100


@actor(rate_limits=[BUCKET])
async def limited_call(payload: dict[str, Any]) -> None:
    """A call under the 100/s bucket."""
    return None


@actor
async def free_call(payload: dict[str, Any]) -> None:
    """A call under no limit, beside the limited ones."""
    return None


registry = [limited_call, free_call]
