"""Workflows in known states for the CLI, dashboard and web UI tests, enqueued as users do
(``JobsClient.enqueue_workflow``) and driven as workers do (claim, start, settle, then the
end hook's release). Works on either backend.

``make_workflow`` enqueues steps given as ``(name, the names it comes after)``, each a job
of actor ``etl_<name>`` unless ``actors`` names another, all in one queue; ``make_diamond``
is ``extract -> t1, t2 -> load -> report`` (report runs once load ended, whatever the
outcome), ``diamond_under_way`` the same with its first step run and its second running.
``start_step`` claims a step (it must be its queue's first due job), ``end_step``
settles it (a failure is for good) and runs the release, ``run_step`` does both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal
from uuid import uuid4

from taskq_core import Workflow
from taskq_core.backend.protocol import Backend, ErrorInfo, JobRow, Start
from taskq_core.client import JobsClient
from taskq_core.statemachine import JobStatus
from taskq_core.workflows import WorkflowRun

LEASE = timedelta(minutes=5)
QUEUE = "etl"
ERROR = ErrorInfo("ValueError", "the March export has no header row", "Traceback: boom")

Outcome = Literal["succeeded", "failed"]

DIAMOND: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("extract", ()),
    ("t1", ("extract",)),
    ("t2", ("extract",)),
    ("load", ("t1", "t2")),
    ("report", ("load",)),
)


@dataclass(frozen=True, slots=True)
class SeededWorkflow(WorkflowRun):
    """What ``enqueue_workflow`` returned, and the queue the steps share."""

    queue: str = QUEUE


async def make_workflow(
    backend: Backend,
    steps: Sequence[tuple[str, Sequence[str]]],
    *,
    name: str | None = "nightly-etl",
    finished: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    actors: Mapping[str, str] | None = None,
    queue: str = QUEUE,
) -> SeededWorkflow:
    """A workflow of ``steps`` (parents first), enqueued in one transaction; the steps
    named in ``finished`` run once their dependencies ended, whatever the outcome."""
    client = JobsClient(backend=backend)
    await client.open()
    wf = Workflow(name, metadata=dict(metadata or {}))
    for step, after in steps:
        actor = (actors or {}).get(step, f"etl_{step}")
        requires = "finished" if step in finished else "succeeded"
        wf.add(actor, {}, name=step, after=list(after), requires=requires, queue=queue)
    run = await client.enqueue_workflow(wf)
    return SeededWorkflow(run.id, run.jobs, queue)


async def make_diamond(
    backend: Backend, *, name: str | None = "nightly-etl", queue: str = QUEUE
) -> SeededWorkflow:
    """The diamond with a report step after it (actors extract, transform, load, report)."""
    actors = {"t1": "transform", "t2": "transform"} | {s: s for s in ("extract", "load", "report")}
    return await make_workflow(
        backend, DIAMOND, name=name, finished=("report",), actors=actors, queue=queue
    )


async def diamond_under_way(backend: Backend) -> SeededWorkflow:
    """``make_diamond``'s with extract succeeded, t1 running, t2 due, load and report
    waiting."""
    seeded = await make_diamond(backend)
    await run_step(backend, seeded, "extract")
    await run_step(backend, seeded, "t1", "running")
    return seeded


async def start_step(backend: Backend, seeded: SeededWorkflow, step: str) -> JobRow:
    """Claim ``step`` (its queue's first due job) and start its body, as a worker does; the
    running row."""
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [seeded.queue], 1, LEASE)
    assert [job.id for job in claimed] == [seeded.jobs[step]], f"{step} is not the first due"
    job = claimed[0]
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    row = await backend.get(job.id)
    assert row is not None
    return row


async def end_step(
    backend: Backend, job: JobRow, outcome: Outcome, *, release: bool = True
) -> JobRow:
    """Settle the running step ``job`` (a failure is for good) and release its dependents
    as the worker's end hook does (``release=False``: as a worker that died before its
    hook ran); its row after."""
    if outcome == "succeeded":
        assert await backend.mark_succeeded(job.lease(), {"step": job.id.hex})
    else:
        assert await backend.mark_failed_or_retry(job.lease(), ERROR, None) is not None
    if release:
        await backend.release_workflow_steps([job.id])
    row = await backend.get(job.id)
    assert row is not None and row.status is JobStatus(outcome), row
    return row


async def run_step(
    backend: Backend,
    seeded: SeededWorkflow,
    step: str,
    outcome: Outcome | Literal["running"] = "succeeded",
    *,
    release: bool = True,
) -> JobRow:
    """``start_step``, then (unless ``outcome`` is ``running``) ``end_step``."""
    job = await start_step(backend, seeded, step)
    if outcome == "running":
        return job
    return await end_step(backend, job, outcome, release=release)


async def run_all(backend: Backend, seeded: SeededWorkflow) -> None:
    """Run every step to success, in the order they were added."""
    for step in seeded.jobs:
        await run_step(backend, seeded, step)
