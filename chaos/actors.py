"""Actors the chaos scenarios run through real `taskq worker` processes.

Every body records its start and its end, with the time and pid (``chaos.markers.body``), in
the file named by ``CHAOS_MARKERS``, so the runner can tell from outside which bodies ran,
when, where and how each ended, even while the database is down. Durations come from the
payload, so a scenario decides them. None of these actors ever fails: a job of theirs that
ends other than ``succeeded`` is the system's doing (``NEVER_FAIL``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

from chaos.markers import body
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
    with body(ctx):
        await asyncio.sleep(payload.get("ms", 100) / 1000)
    return {"pid": os.getpid()}


@chaos_actor
def work_thread(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """``work`` as a plain ``def`` (run in a thread): nothing can interrupt its sleep."""
    with body(ctx):
        time.sleep(payload.get("ms", 100) / 1000)
    return {"pid": os.getpid()}


@chaos_actor
async def transactional(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Sleeps ``ms`` ms, then writes one ``chaos_effects`` row through ``ctx.connection()``.

    The row commits with the job's success or not at all, so a job never has two rows.
    """
    with body(ctx):
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
    return {"pid": os.getpid()}


@chaos_actor
async def cooperative(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Waits ``seconds`` unless its cancel_event is set first (then returns early)."""
    with body(ctx) as mark:
        try:
            await asyncio.wait_for(ctx.cancel_event.wait(), payload.get("seconds", 5))
        except TimeoutError:
            return {"pid": os.getpid()}
        mark.stopped()
    return {"pid": os.getpid()}


def _stubborn_seconds(payload: dict[str, Any], ctx: Ctx) -> float:
    """``seconds`` for the first body, ``retry_seconds`` (default the same) for later ones: a
    job given back by a shutdown need not hold its next worker as long."""
    seconds = float(payload.get("seconds", 30))
    return seconds if ctx.attempt <= 1 else float(payload.get("retry_seconds", seconds))


@chaos_actor
async def stubborn(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """Runs its seconds whatever happens: never looks at its cancel_event, swallows cancels."""
    with body(ctx):
        deadline = time.monotonic() + _stubborn_seconds(payload, ctx)
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.sleep(left)
            except asyncio.CancelledError:
                continue  # the bug under test: a body that refuses to stop
    return {"pid": os.getpid()}


@chaos_actor
def stubborn_thread(payload: dict[str, Any], ctx: Ctx) -> dict[str, int]:
    """A plain ``def`` (run in a thread) that sleeps its seconds: nothing can interrupt it."""
    with body(ctx):
        time.sleep(_stubborn_seconds(payload, ctx))
    return {"pid": os.getpid()}


registry = [work, work_thread, transactional, cooperative, stubborn, stubborn_thread]
# Every actor above returns normally (the transactional one raises only where JobContext has
# no connection(), and its scenario is skipped there): none of their jobs may end failed.
NEVER_FAIL = frozenset(ref.name for ref in registry)


def has_transactional_connection() -> bool:
    """Whether this TaskQ's JobContext offers ``connection()`` (transactional completion)."""
    return callable(getattr(JobContext, "connection", None))
