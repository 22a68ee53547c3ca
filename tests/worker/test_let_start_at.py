"""A body's context says when the worker let it start: the time of its last lease check, just
before the actor's function is called (an ``async def`` on the loop, a plain ``def`` in its
thread). The chaos ledger dates bodies from it: a process frozen between that check and the
body's first line resumes a body that had begun."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import UUID

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs
from taskq_core.constants import EXIT_OK
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

_seen: dict[UUID, tuple[float | None, float]] = {}  # job -> (let start at, first line at)


@actor
async def async_body(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    _seen[ctx.job_id] = (ctx._let_start_at, time.time())


@actor
def thread_body(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    _seen[ctx.job_id] = (ctx._let_start_at, time.time())


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        _seen.clear()
        yield opened


async def test_each_body_knows_when_its_worker_let_it_start(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    before = time.time()
    jobs = [await backend.enqueue(EnqueueArgs(name, {})) for name in ("async_body", "thread_body")]
    worker = make_worker(backend, [async_body, thread_body])
    assert await asyncio.wait_for(worker.run(), 60) == EXIT_OK
    for job in jobs:
        let_start_at, first_line_at = _seen[job.id]
        assert let_start_at is not None
        assert before <= let_start_at <= first_line_at
