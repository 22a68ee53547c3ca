"""Actors the worker benchmarks run (``--actors benchmarks.bench_actors:registry``)."""

from __future__ import annotations

import time
from typing import Any

from taskq_core import actor


@actor
async def noop(payload: dict[str, Any]) -> None:
    """Does nothing: the benchmark measures the queue, not the work."""
    return None


@actor(ephemeral=True)
async def noop_ephemeral(payload: dict[str, Any]) -> None:
    """``noop`` whose success leaves no row (the cost report's ephemeral phase)."""
    return None


@actor
async def stamp(payload: dict[str, Any]) -> float:
    """Returns when it started, for enqueue->start latency."""
    return time.time()


registry = [noop, noop_ephemeral, stamp]
