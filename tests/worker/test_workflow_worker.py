"""Workflows through a whole in-process worker, on both backends: a step reads its
dependencies' results (``ctx.upstream``) after they all ended, a failure cancels the join
while its sibling still runs, a ``requires="finished"`` step runs anyway, and a step grafts
a map over a list and its join onto its own workflow (``ctx.workflow.add``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from taskq_core import Workflow
from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend
from taskq_core.backend.protocol.workflows import WorkflowStatus
from taskq_core.client import JobsClient
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend

ONCE = RetryPolicy(kind="non_retryable")
GATES: dict[str, asyncio.Event] = {}
SEEN: dict[str, Any] = {}


@actor(retry=ONCE)
async def extract(payload: dict[str, Any]) -> dict[str, int]:
    return {"rows": 3}


@actor(retry=ONCE)
async def transform(payload: dict[str, Any], ctx: JobContext[Any]) -> int:
    gate = GATES.get(f"t{payload['part']}")
    if gate is not None:
        await gate.wait()
    if payload.get("fail"):
        raise RuntimeError("bad part")
    return int(ctx.upstream["extract"].result["rows"]) * int(payload["part"])


@actor(retry=ONCE)
async def load(payload: dict[str, Any], ctx: JobContext[Any]) -> int:
    SEEN["load"] = {name: (up.status, up.result) for name, up in ctx.upstream.items()}
    return sum(up.result for up in ctx.upstream.values())


@actor(retry=ONCE)
async def report(payload: dict[str, Any], ctx: JobContext[Any]) -> str:
    SEEN["report"] = {name: up.status for name, up in ctx.upstream.items()}
    return "reported"


@actor(retry=ONCE)
async def fan_out(payload: dict[str, Any], ctx: JobContext[Any]) -> None:
    assert ctx.workflow is not None
    parts = [await ctx.workflow.add(square, {"n": n}, name=f"sq{n}") for n in payload["items"]]
    await ctx.workflow.add(total, {}, after=parts)


@actor(retry=ONCE)
async def square(payload: dict[str, Any]) -> int:
    return int(payload["n"]) ** 2


@actor(retry=ONCE)
async def total(payload: dict[str, Any], ctx: JobContext[Any]) -> int:
    return sum(up.result for up in ctx.upstream.values())


ACTORS = [extract, transform, load, report, fan_out, square, total]


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    GATES.clear()
    SEEN.clear()
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


def diamond(fail: bool = False) -> Workflow:
    wf = Workflow("nightly-etl")
    a = wf.add(extract, {"day": "2026-12-04"})
    b = wf.add(transform, {"part": 1, "fail": fail}, name="t1", after=[a])
    c = wf.add(transform, {"part": 2}, name="t2", after=[a])
    d = wf.add(load, {}, after=[b, c])
    wf.add(report, {}, after=[d], requires="finished")
    return wf


async def test_the_join_reads_both_results_after_both_ended(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        run = await client.enqueue_workflow(diamond())
        assert set(run.jobs) == {"extract", "t1", "t2", "load", "report"}
        await asyncio.wait_for(make_worker(backend, ACTORS).run(), 60)
        ended = await client.wait_for_workflow(run.id, timeout=10)
        assert ended.status is WorkflowStatus.SUCCEEDED and ended.counts == {JobStatus.SUCCEEDED: 5}
        load_row = await client.get(run.jobs["load"])
    assert SEEN["load"] == {"t1": (JobStatus.SUCCEEDED, 3), "t2": (JobStatus.SUCCEEDED, 6)}
    assert load_row is not None and load_row.result == 9
    assert load_row.metadata["workflow_id"] == str(run.id)
    assert load_row.metadata["workflow_step"] == "load"
    # Every body started after all its dependencies ended.
    async with JobsClient(backend=backend) as client:
        rows = {name: await client.get(job_id) for name, job_id in run.jobs.items()}
    for child, parents in {"t1": ["extract"], "t2": ["extract"], "load": ["t1", "t2"]}.items():
        for parent in parents:
            assert rows[parent].finished_at <= rows[child].started_at  # type: ignore[union-attr,operator]


async def test_a_failure_cancels_the_join_while_its_sibling_still_runs(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    GATES["t2"] = asyncio.Event()
    async with JobsClient(backend=backend) as client:
        run = await client.enqueue_workflow(diamond(fail=True))
        worker = asyncio.create_task(make_worker(backend, ACTORS).run())
        while (await client.get(run.jobs["load"])).status is not JobStatus.CANCELLED:  # type: ignore[union-attr]
            await asyncio.sleep(0.02)
        t2 = await client.get(run.jobs["t2"])
        assert t2 is not None and t2.status is JobStatus.RUNNING
        GATES["t2"].set()
        await asyncio.wait_for(worker, 60)
        ended = await client.wait_for_workflow(run.id, timeout=10)
        load_row = await client.get(run.jobs["load"])
        t2 = await client.get(run.jobs["t2"])
    assert ended.status is WorkflowStatus.FAILED
    assert load_row is not None and load_row.cancel_reason == "dependency t1 failed"
    assert t2 is not None and t2.status is JobStatus.SUCCEEDED
    assert SEEN["report"] == {"load": JobStatus.CANCELLED}  # requires="finished" ran anyway
    assert "load" not in SEEN


async def test_a_step_grafts_a_map_and_its_join(
    backend: Backend, make_worker: Callable[..., Worker]
) -> None:
    wf = Workflow()
    wf.add(fan_out, {"items": [1, 2, 3, 4]})
    async with JobsClient(backend=backend) as client:
        run = await client.enqueue_workflow(wf)
        await asyncio.wait_for(make_worker(backend, ACTORS).run(), 60)
        ended = await client.wait_for_workflow(run.id, timeout=10)
        steps = {step.name: step for step in await client.workflow_steps(run.id)}
        total_row = await client.get(steps["total"].job_id)
    assert ended.status is WorkflowStatus.SUCCEEDED and ended.total == 6
    assert steps["total"].after == ("sq1", "sq2", "sq3", "sq4")
    assert total_row is not None and total_row.result == 1 + 4 + 9 + 16
