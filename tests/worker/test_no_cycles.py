"""A job that ends well leaves nothing for the garbage collector: its holding, context, row
and task are freed by reference counting the moment the worker lets go of them.

A reference cycle per job (the holding kept its context, the context's progress factory
kept the holding) made every job's objects garbage only the cyclic collector could free:
about thirty per job, which made the collector run three times as often and cost a busy
worker a tenth of its CPU. The collector is told to keep what it finds unreachable
(``DEBUG_SAVEALL``) while a whole in-process worker drains, on both backends."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs, JobFilter
from taskq_core.constants import EXIT_OK
from taskq_core.statemachine import JobStatus
from taskq_core.worker import consumer
from taskq_core.worker.active import ActiveJob
from taskq_core.worker.completer import Completer
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

JOBS = 40


@actor
async def plain(payload: dict[str, Any]) -> None:
    return None


@actor
async def reports(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> int:
    await ctx.report_progress(1, 2, "half")
    return 1


@actor
def in_thread(payload: dict[str, Any]) -> None:
    return None


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


@pytest.fixture
def unreachable() -> Iterator[list[Any]]:
    """What the collector finds unreachable from here on, kept rather than freed."""
    gc.collect()
    gc.garbage.clear()
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()


async def test_finished_jobs_leave_no_cyclic_garbage(
    backend: Backend, make_worker: Callable[..., Worker], unreachable: list[Any]
) -> None:
    actors = [plain, reports, in_thread]
    await backend.enqueue_batch_fast(
        [EnqueueArgs(ref.name, {"n": n}) for ref in actors for n in range(JOBS)]
    )
    worker = make_worker(backend, actors)
    assert await asyncio.wait_for(worker.run(), 60) == EXIT_OK
    del worker
    rows = await backend.list_jobs(JobFilter(limit=None))
    assert {row.status for row in rows} == {JobStatus.SUCCEEDED} and len(rows) == 3 * JOBS
    gc.collect()
    per_job = (ActiveJob, JobContext, asyncio.Task)
    left = [type(o).__name__ for o in unreachable if isinstance(o, per_job)]
    assert left == []


async def test_a_job_waiting_for_its_write_has_let_go_of_its_context_and_task(
    backend: Backend, make_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A holding waits for the completer's flush (and a batch child for its batch's hook too):
    # what it keeps meanwhile is what the collector walks, job after job.
    contexts: dict[Any, weakref.ref[JobContext[Any]]] = {}
    alive_at_submit: list[tuple[bool, bool]] = []
    make_context = consumer.job_context
    submit = Completer.submit

    def tracked_context(deps: Any, ref: Any, held: ActiveJob, *args: Any) -> JobContext[Any]:
        ctx = make_context(deps, ref, held, *args)
        contexts[held.job.id] = weakref.ref(ctx)
        return ctx

    def tracked_submit(self: Completer, held: ActiveJob, success: Any) -> None:
        alive_at_submit.append((contexts[held.job.id]() is not None, held.task is not None))
        submit(self, held, success)

    monkeypatch.setattr(consumer, "job_context", tracked_context)
    monkeypatch.setattr(Completer, "submit", tracked_submit)
    await backend.enqueue_batch_fast([EnqueueArgs(plain.name, {"n": n}) for n in range(JOBS)])
    assert await asyncio.wait_for(make_worker(backend, [plain]).run(), 60) == EXIT_OK
    assert alive_at_submit == [(False, False)] * JOBS
