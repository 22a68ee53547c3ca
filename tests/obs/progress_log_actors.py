"""Actors that log and report progress, for the log context and progress tests (in-process
and through a real ``taskq worker``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import structlog

from taskq_core import JobContext, RetryPolicy, actor

stdlib_log = logging.getLogger("tests.obs.actors")


@actor
async def log_async(payload: dict[str, Any]) -> None:
    """One structlog line and one stdlib line, from an async actor."""
    structlog.get_logger("tests").info("async_structlog_line", n=payload["n"])
    stdlib_log.info("async stdlib line %s", payload["n"])


@actor
def log_sync(payload: dict[str, Any]) -> None:
    """The same from a plain ``def`` actor (its own thread)."""
    structlog.get_logger("tests").info("sync_structlog_line", n=payload["n"])
    stdlib_log.info("sync stdlib line %s", payload["n"])


@actor(retry=RetryPolicy(kind="non_retryable"))
async def log_failing(payload: dict[str, Any]) -> None:
    """Logs, then fails (the worker's own line about the failure carries the context)."""
    stdlib_log.warning("about to fail")
    raise RuntimeError("failing on purpose")


def _wait_for_file(path: Path, timeout: float = 60.0) -> None:
    """Block (a plain ``def`` actor) until the test creates ``path``."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


async def _await_file(path: Path, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(path.exists):
            await asyncio.sleep(0.02)


@actor
async def progress_then_wait(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    """Reports 3 of 10, then holds until the file ``payload['release']`` exists, then
    reports 10 of 10."""
    await ctx.report_progress(3, 10, "three down")
    await _await_file(Path(payload["release"]))
    await ctx.report_progress(10, 10, "done")
    return "ok"


@actor
def sync_progress_then_wait(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    """The same from a plain ``def`` actor."""
    ctx.report_progress_sync(3, 10, "three down")
    _wait_for_file(Path(payload["release"]))
    ctx.report_progress_sync(10, 10, "done")
    return "ok"


@actor
async def many_reports(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> int:
    """``payload['count']`` reports in a row, without yielding to the loop."""
    count = int(payload["count"])
    for index in range(1, count + 1):
        await ctx.report_progress(index, count, f"item {index}")
    return os.getpid()


registry = [
    log_async,
    log_sync,
    log_failing,
    progress_then_wait,
    sync_progress_then_wait,
    many_reports,
]
