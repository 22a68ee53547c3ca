"""``@actor(ephemeral=True)`` through a real worker, on both backends: a plain job that
succeeds leaves no row; a failure, a batch child, a workflow step and a job with a unique key
keep theirs (something reads them after the end)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from taskq_core.actors import actor
from taskq_core.backend.protocol import Backend, JobFilter
from taskq_core.batches import AbortBatchAfter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from taskq_core.workflows import Workflow
from tests.backend_pair import KINDS, open_backend


@actor(ephemeral=True, retry=RetryPolicy(kind="non_retryable"))
async def ping(payload: dict[str, Any]) -> int:
    if payload.get("fail"):
        raise RuntimeError("no pong")
    return int(payload["n"])


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


async def test_only_the_rows_nothing_reads_after_the_end_are_deleted(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        plain = [await client.enqueue(ping, {"n": n}) for n in range(20)]
        failed = await client.enqueue(ping, {"n": 0, "fail": True})
        keyed = await client.enqueue(ping, {"n": 1}, unique_key="ping-1")
        plain += await client.enqueue_batch([EnqueueItem(ping, {"n": n}) for n in range(3)])
        children = await client.enqueue_batch(  # a tracked batch: its hook reads them
            [EnqueueItem(ping, {"n": n}) for n in range(3)], failure_policy=AbortBatchAfter(3)
        )
        workflow = Workflow("pings")
        workflow.add(ping, {"n": 2}, name="first")
        run = await client.enqueue_workflow(workflow)
    code = await asyncio.wait_for(make_worker(backend, [ping]).run(), 60)
    assert code != 0  # the failure, at --until-idle
    left = {job.id: job.status for job in await backend.list_jobs(JobFilter(limit=None))}
    assert not {job.id for job in plain} & left.keys()
    assert left.pop(failed.id) is JobStatus.FAILED
    kept = [keyed.id, *(child.id for child in children), *run.jobs.values()]
    assert {left.pop(job_id) for job_id in kept} == {JobStatus.SUCCEEDED}
    assert left == {}
