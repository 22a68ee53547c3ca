"""Actors the end-to-end tests run through the real `taskq worker` binary."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any

from taskq_core import JobContext, RetryPolicy, actor


@actor
async def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Returns its payload."""
    return payload


@actor(retry=RetryPolicy(kind="non_retryable"))
async def explode(payload: dict[str, Any]) -> None:
    """Fails for good."""
    raise RuntimeError("exploded")


@actor(max_concurrent=1)
async def exclusive(payload: dict[str, Any]) -> dict[str, float]:
    """Records when it ran; the test checks no two runs overlap."""
    start = time.time()
    await asyncio.sleep(0.02)
    return {"start": start, "end": time.time(), "pid": os.getpid()}


@actor(queue="fair")
async def fair(payload: dict[str, Any]) -> dict[str, float]:
    """Records when it started."""
    return {"start": time.time()}


@actor
async def stamp(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, float]:
    """Records when the actor started, for latency checks."""
    return {"start": time.time()}


@actor(retry=RetryPolicy(max_attempts=3, base=timedelta(milliseconds=50), jitter=0))
async def sleepy(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    """Sleeps ``seconds`` unless cancelled first."""
    try:
        await asyncio.wait_for(ctx.cancel_event.wait(), payload.get("seconds", 30))
        return "cancelled"
    except TimeoutError:
        return "slept"


@actor(retry=RetryPolicy(max_attempts=3, base=timedelta(milliseconds=50), jitter=0))
async def crash_once(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, Any]:
    """The first attempt hangs (the test kills its worker); later attempts finish at once."""
    if ctx.attempt == 1:
        await asyncio.sleep(60)
    return {"attempt": ctx.attempt, "pid": os.getpid()}


@actor
async def oblivious(payload: dict[str, Any]) -> str:
    """Never looks at its cancel_event: only a forced cancel stops it."""
    await asyncio.sleep(payload.get("seconds", 30))
    return "finished"


@actor
async def stubborn(payload: dict[str, Any]) -> str:
    """Ignores its cancel_event and swallows the first forced cancel for a while."""
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await asyncio.sleep(payload.get("linger", 5))
    return "finished"


@actor
def long_first_run(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, Any]:
    """A plain ``def`` (a thread nothing can stop): its first body sleeps ``seconds``, every
    later one returns at once."""
    if ctx.attempt == 1:
        time.sleep(payload.get("seconds", 60))
    return {"attempt": ctx.attempt, "pid": os.getpid()}


@actor
async def blocker(payload: dict[str, Any]) -> None:
    """Blocks the event loop (a bug the watchdog must catch)."""
    time.sleep(payload.get("seconds", 10))  # noqa: ASYNC251 - the bug under test


registry = [
    echo,
    explode,
    exclusive,
    fair,
    stamp,
    sleepy,
    crash_once,
    oblivious,
    stubborn,
    long_first_run,
    blocker,
]
moved = [actor(name="echo", queue="elsewhere")(echo.fn)]
not_a_registry = (a for a in registry)
