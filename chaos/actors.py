"""Actors the chaos scenarios run through real `taskq worker` processes.

Every body records ``start`` and ``done`` markers (see ``chaos.markers``) in the file named by
``CHAOS_MARKERS``, so the runner can tell from outside which bodies ran and which finished,
even while the database is down. Durations come from the payload, so a scenario decides them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

from chaos.markers import record
from taskq_core import JobContext, RetryPolicy, actor
from taskq_core.actors import ActorRef
from taskq_core.constants import validate_identifier

# Interrupted bodies are retried soon: the runner measures recovery, not backoff.
RETRY = RetryPolicy(max_attempts=5, base=timedelta(milliseconds=100), jitter=0)
EFFECTS_TABLE = "chaos_effects"

Ctx = JobContext[dict[str, Any]]


def chaos_actor(fn: Callable[..., Any]) -> ActorRef:
    """``@actor`` with the chaos retry policy, typed for mypy."""
    return cast(ActorRef, actor(retry=RETRY)(fn))


@chaos_actor
async def work(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Sleeps ``ms`` milliseconds; the plain at-least-once body."""
    record("start", ctx.job_id, ctx.attempt)
    await asyncio.sleep(payload.get("ms", 100) / 1000)
    record("done", ctx.job_id, ctx.attempt)
    return {"pid": os.getpid()}


@chaos_actor
async def transactional(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Sleeps ``ms`` ms, then writes one ``chaos_effects`` row through ``ctx.connection()``.

    The row commits with the job's success or not at all, so a job never has two rows.
    """
    record("start", ctx.job_id, ctx.attempt)
    await asyncio.sleep(payload.get("ms", 100) / 1000)
    connect = getattr(ctx, "connection", None)
    if connect is None:
        raise RuntimeError("JobContext.connection() is not available in this TaskQ version")
    conn = await cast(Callable[[], Awaitable[Any]], connect)()
    table = f"{validate_identifier(os.environ['TASKQ_SCHEMA_NAME'])}.{EFFECTS_TABLE}"
    await conn.execute(
        f"INSERT INTO {table} (job_id, attempt, pid) VALUES ($1, $2, $3)",
        ctx.job_id,
        ctx.attempt,
        os.getpid(),
    )
    record("done", ctx.job_id, ctx.attempt)
    return {"pid": os.getpid()}


@chaos_actor
async def cooperative(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Waits ``seconds`` unless its cancel_event is set first (then returns early)."""
    record("start", ctx.job_id, ctx.attempt)
    try:
        await asyncio.wait_for(ctx.cancel_event.wait(), payload.get("seconds", 5))
    except TimeoutError:
        record("done", ctx.job_id, ctx.attempt)
        return {"pid": os.getpid()}
    record("stopped", ctx.job_id, ctx.attempt)
    return {"pid": os.getpid()}


@chaos_actor
async def stubborn(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Runs ``seconds`` whatever happens: never looks at its cancel_event, swallows cancels."""
    record("start", ctx.job_id, ctx.attempt)
    deadline = time.monotonic() + payload.get("seconds", 30)
    while (left := deadline - time.monotonic()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            continue  # the bug under test: a body that refuses to stop
    record("done", ctx.job_id, ctx.attempt)
    return {"pid": os.getpid()}


@chaos_actor
def stubborn_thread(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """A plain ``def`` (run in a thread) that sleeps ``seconds``: nothing can interrupt it."""
    record("start", ctx.job_id, ctx.attempt)
    time.sleep(payload.get("seconds", 30))
    record("done", ctx.job_id, ctx.attempt)
    return {"pid": os.getpid()}


registry = [work, transactional, cooperative, stubborn, stubborn_thread]


def has_transactional_connection() -> bool:
    """Whether this TaskQ's JobContext offers ``connection()`` (transactional completion)."""
    return callable(getattr(JobContext, "connection", None))
