"""Actors of the SIGSTOP regression tests: each body writes its start and its end to the
per-body ledger (``chaos.markers``, the file ``CHAOS_MARKERS`` names), with its pid and time.

A gate is a file the test creates: a gated body waits for it, and so does its cleanup when it
is cancelled, so the test decides when a body ends, with no timing involved.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from chaos.markers import body
from taskq_core import JobContext, RetryPolicy, actor
from taskq_core.actors import ActorRef

QUEUE = "pause"
POLL = 0.01  # how often a gated body looks for its gate
RETRY = RetryPolicy(max_attempts=10, base=timedelta(milliseconds=50), jitter=0)
Ctx = JobContext[dict[str, Any]]


def pause_actor(fn: Callable[..., Any]) -> ActorRef:
    """``@actor`` on the tests' queue, with quick retries, typed for mypy."""
    return cast(ActorRef, actor(queue=QUEUE, retry=RETRY)(fn))


async def _until_open(gate: Path) -> None:
    """Wait for the gate; a cancel waits for it too (a cleanup that takes its time), then
    propagates."""
    cancelled = False
    while not gate.exists():  # noqa: ASYNC240 - one stat of a local file per poll
        try:
            await asyncio.sleep(POLL)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


@pause_actor
async def gated(payload: dict[str, Any], ctx: Ctx) -> int:
    """Runs until the gate ``payload["gate"]`` exists, cancelled or not."""
    with body(ctx):
        await _until_open(Path(payload["gate"]))
    return os.getpid()


@pause_actor
def gated_thread(payload: dict[str, Any], ctx: Ctx) -> int:
    """A plain ``def`` (a thread no cancel can stop) that runs until the gate exists."""
    with body(ctx):
        gate = Path(payload["gate"])
        while not gate.exists():
            time.sleep(POLL)
    return os.getpid()


@pause_actor
async def quick(payload: dict[str, Any], ctx: Ctx) -> int:
    """Returns at once."""
    with body(ctx):
        pass
    return os.getpid()


registry = [gated, gated_thread, quick]
