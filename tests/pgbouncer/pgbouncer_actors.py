"""Actors the PgBouncer tests run through the real ``taskq worker``."""

from __future__ import annotations

from typing import Any

from taskq_core import JobContext, actor


@actor
async def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Returns its payload (its success goes through the completer's batched writes)."""
    return payload


@actor
async def session_name(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, str]:
    """Returns the application_name of the session its success is written on: the
    transaction of ``ctx.connection()``, which commits the result with the job."""
    conn = await ctx.connection()
    return {"session": await conn.fetchval("SELECT current_setting('application_name')")}


registry = [echo, session_name]
