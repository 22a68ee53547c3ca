"""Workflows for the CLI and dashboard tests, enqueued as users do and driven as workers do.

``make_diamond`` enqueues ``extract -> t1, t2 -> load -> report`` through
``JobsClient.enqueue_workflow`` (report runs once load ended, whatever the outcome);
``run_step`` claims the first due step of the queue, ends it (a failure is for good) and runs
the release, as a worker's settle and end hook do. Works on either backend.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal
from uuid import uuid4

from taskq_core import Workflow
from taskq_core.backend.protocol import Backend, ErrorInfo, JobRow, Start
from taskq_core.client import JobsClient
from taskq_core.workflows import WorkflowRun

LEASE = timedelta(minutes=5)
QUEUE = "etl"
ERROR = ErrorInfo("ValueError", "the March export has no header row", "Traceback: boom")


async def make_diamond(
    backend: Backend, *, name: str | None = "nightly-etl", queue: str = QUEUE
) -> WorkflowRun:
    """The diamond with a report step after it, enqueued in one transaction."""
    client = JobsClient(backend=backend)
    await client.open()
    wf = Workflow(name)
    a = wf.add("extract", {"day": "2026-12-04"}, queue=queue)
    b = wf.add("transform", {"part": 1}, name="t1", after=[a], queue=queue)
    c = wf.add("transform", {"part": 2}, name="t2", after=[a], queue=queue)
    d = wf.add("load", {}, after=[b, c], queue=queue)
    wf.add("report", {}, after=[d], requires="finished", queue=queue)
    return await client.enqueue_workflow(wf)


async def run_step(
    backend: Backend,
    run: WorkflowRun,
    step: str,
    outcome: Literal["succeeded", "failed", "running"] = "succeeded",
    *,
    queue: str = QUEUE,
    release: bool = True,
) -> JobRow:
    """Claim ``step`` (the first due job of ``queue``), start it, and end it with
    ``outcome`` then run the release (``running``: leave it running; ``release=False``: a
    worker that died before its end hook); its row after."""
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [queue], 1, LEASE)
    assert [job.id for job in claimed] == [run.jobs[step]], f"{step} is not the first due"
    job = claimed[0]
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    if outcome == "succeeded":
        assert await backend.mark_succeeded(job.lease(), {"step": step})
    elif outcome == "failed":
        assert await backend.mark_failed_or_retry(job.lease(), ERROR, None) is not None
    if outcome != "running" and release:
        await backend.release_workflow_steps([job.id])
    row = await backend.get(job.id)
    assert row is not None
    return row


async def run_all(backend: Backend, run: WorkflowRun, *, queue: str = QUEUE) -> None:
    """Run every step of the diamond to success, in order."""
    for step in run.jobs:
        await run_step(backend, run, step, queue=queue)
