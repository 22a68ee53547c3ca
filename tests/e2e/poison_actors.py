"""Actors of the poison-job end-to-end tests: two that take down their own worker process (mid-body,
and at the first line), and a harmless one."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import asyncpg

from taskq_core import JobContext, RetryPolicy, actor
from taskq_core.constants import validate_identifier

# How long the body waits for its start mark to be written before it kills its worker.
START_MARK_TIMEOUT = 30.0


async def _wait_for_start_mark(ctx: JobContext[dict[str, Any]]) -> None:
    """Until the worker has recorded this body's start (its completer writes start marks
    asynchronously), so the crash happens mid-body, as a real one deep in a job would."""
    schema = validate_identifier(os.environ["TASKQ_SCHEMA_NAME"])
    conn = await asyncpg.connect(os.environ["TASKQ_PG_DSN"])
    try:
        deadline = time.monotonic() + START_MARK_TIMEOUT
        query = f"SELECT started_at IS NOT NULL FROM {schema}.jobs WHERE id = $1"
        while not await conn.fetchval(query, ctx.job_id) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


@actor(queue="poison", priority=100, retry=RetryPolicy(kind="transient", max_attempts=20))
async def take_down_worker(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    """Kills the worker process running it mid-body, as a segfaulting extension or an OOM
    kill would."""
    await _wait_for_start_mark(ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@actor(queue="poison", priority=100, retry=RetryPolicy(kind="transient", max_attempts=20))
async def kill_at_once(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    """Kills the worker process running it at its very first line, before any await: on its
    first run the worker's batched start mark has not gone out yet."""
    os.kill(os.getpid(), signal.SIGKILL)


@actor(queue="poison")
async def harmless(payload: dict[str, Any]) -> dict[str, int]:
    """An ordinary job in the same queue; it must still run."""
    return {"n": int(payload.get("n", 0))}


registry = [take_down_worker, kill_at_once, harmless]
