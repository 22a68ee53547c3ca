"""Workflows in known states for the UI tests, written through the Backend protocol as a
client's ``enqueue_workflow`` and a worker (claim, start, settle, then the end hook's
release) would write them.

Each step has a queue of its own, so a test claims exactly the step it names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID, uuid4

from taskq_core.backend.protocol import Backend, JobRow, Start
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_REQUIRES_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.states import LEASE, args, new_queue, reload
from tests.ui.states import ERROR

Outcome = Literal["succeeded", "failed"]


@dataclass
class SeededWorkflow:
    """A workflow made by ``make_workflow``: its id, and each step's job id and queue."""

    id: UUID
    ids: dict[str, UUID] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)


async def make_workflow(
    backend: Backend,
    steps: Sequence[tuple[str, Sequence[str]]],
    *,
    name: str | None = "nightly-etl",
    finished: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
) -> SeededWorkflow:
    """A workflow of ``steps`` (each ``(name, the names it comes after)``, parents first);
    the steps named in ``finished`` run once their dependencies ended, whatever the
    outcome. Every step fails for good at its first failure."""
    seeded = SeededWorkflow(uuid7())
    new: list[NewStep] = []
    for step, after in steps:
        marks: dict[str, Any] = {WORKFLOW_ID_KEY: str(seeded.id), WORKFLOW_STEP_KEY: step}
        if step in finished:
            marks[WORKFLOW_REQUIRES_KEY] = "finished"
        seeded.ids[step] = uuid7()
        seeded.queues[step] = new_queue()
        job = args(
            f"etl_{step}",
            job_id=seeded.ids[step],
            queue=seeded.queues[step],
            metadata=marks,
            waiting=bool(after),
            retry_kind="non_retryable",
        )
        new.append(NewStep(job, step, tuple(seeded.ids[parent] for parent in after)))
    await backend.create_workflow(NewWorkflow(seeded.id, name, dict(metadata or {})), new)
    return seeded


async def start_step(backend: Backend, seeded: SeededWorkflow, step: str) -> JobRow:
    """Claim ``step`` (it must be due) and start its body, as a worker does; the running
    row."""
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [seeded.queues[step]], 1, LEASE)
    assert [row.id for row in claimed] == [seeded.ids[step]], f"step {step} is not due"
    job = claimed[0]
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    return await reload(backend, job.id)


async def end_step(
    backend: Backend, job: JobRow, outcome: Outcome, *, release: bool = True
) -> JobRow:
    """Settle the running step ``job`` (a failure is for good) and release its dependents
    as the worker's end hook does (``release=False``: as a worker that died before its
    hook ran)."""
    if outcome == "succeeded":
        assert await backend.mark_succeeded(job.lease(), {"step": job.id.hex})
    else:
        assert await backend.mark_failed_or_retry(job.lease(), ERROR, None) is not None
    if release:
        await backend.release_workflow_steps([job.id])
    row = await reload(backend, job.id)
    assert row.status is JobStatus(outcome), row.status
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
