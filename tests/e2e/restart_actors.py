"""Actors of the PostgreSQL restart test: one whose every body fails, one that succeeds.

A failing body ends in the consumer's own failure write (a retry, then ``failed``), the path
a restart used to end standalone workers on; a success goes through the completer's batches.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from taskq_core import RetryPolicy, actor

# Retries come soon, so each job's bodies meet several restarts within the test.
_RETRY = RetryPolicy(max_attempts=3, base=timedelta(milliseconds=20), jitter=0)


@actor(retry=_RETRY)
async def always_fails(payload: dict[str, Any]) -> None:
    """Runs ``ms`` milliseconds, then raises."""
    await asyncio.sleep(payload["ms"] / 1000)
    raise RuntimeError("this actor always fails")


@actor(retry=_RETRY)
async def succeeds(payload: dict[str, Any]) -> str:
    """Runs ``ms`` milliseconds, then succeeds."""
    await asyncio.sleep(payload["ms"] / 1000)
    return "ok"


registry = [always_fails, succeeds]
