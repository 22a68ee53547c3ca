"""The actor the failover test runs: a body whose effect commits with its success."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from taskq_core import JobContext, RetryPolicy, actor

EFFECTS_TABLE = "public.failover_effects"


@actor(retry=RetryPolicy(max_attempts=20, base=timedelta(milliseconds=100), jitter=0))
async def effect(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, int]:
    """Works ``seconds``, then writes one effect row in the transaction of its success: the
    row exists exactly when the job succeeded, however often the body ran."""
    await asyncio.sleep(payload.get("seconds", 0.05))
    conn = await ctx.connection()
    await conn.execute(
        f"INSERT INTO {EFFECTS_TABLE} (job_id, attempt) VALUES ($1, $2)", ctx.job_id, ctx.attempt
    )
    return {"attempt": ctx.attempt}


registry = [effect]
