"""The cancel signal a body reads from its JobContext: the event is made on first read, and
whichever comes first, the worker's signal or the body's read, the body sees the signal."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from taskq_core.actors import JobContext


def context() -> JobContext[dict[str, Any]]:
    return JobContext(uuid.uuid4(), 1, uuid.uuid4(), "a", "default", {})


async def test_a_signal_before_the_first_read_is_seen_by_the_event() -> None:
    ctx = context()
    ctx.signal_cancel()
    assert not ctx.interrupted  # the body has not looked yet
    await asyncio.wait_for(ctx.cancel_event.wait(), 1)
    assert ctx.cancel_requested and ctx.interrupted


async def test_a_signal_after_the_first_read_wakes_the_waiting_body() -> None:
    ctx = context()
    waiting = asyncio.create_task(ctx.cancel_event.wait())
    await asyncio.sleep(0)
    assert not ctx.cancel_requested
    ctx.signal_cancel()
    await asyncio.wait_for(waiting, 1)
    assert ctx.interrupted


def test_a_plain_def_body_reading_from_its_thread_sees_the_signal() -> None:
    ctx = context()
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(ctx.cancel_event.is_set()))
    ctx.signal_cancel()
    thread.start()
    thread.join()
    assert seen == [True] and ctx.cancel_requested


def test_a_context_never_signalled_is_not_interrupted() -> None:
    ctx = context()
    assert not ctx.cancel_requested and not ctx.interrupted and not ctx.cancel_event.is_set()
