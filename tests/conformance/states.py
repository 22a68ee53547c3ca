"""Put jobs into any state through the Backend protocol alone, so every conformance test
reaches its starting point the same way on every backend."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from taskq_core.backend.protocol import (
    ActorDeclaration,
    Backend,
    EnqueueArgs,
    ErrorInfo,
    JobRow,
    Lease,
    Start,
)
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_REQUIRES_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness

LEASE = timedelta(seconds=30)
GRACE = timedelta(seconds=5)
BOOM = ErrorInfo("ValueError", "boom", "Traceback: boom")
# How long a test waits for a NOTIFY to arrive (memory sets events synchronously).
WAKE_TIMEOUT = 5.0


def new_queue() -> str:
    """A queue name no other job of the test uses."""
    return f"q_{uuid4().hex[:10]}"


def args(actor: str = "work", **fields: Any) -> EnqueueArgs:
    """EnqueueArgs with a small default payload."""
    fields.setdefault("payload", {"n": 1})
    return EnqueueArgs(actor=actor, **fields)


def lease(job: JobRow, worker: UUID | None = None, *, attempt: int | None = None) -> Lease:
    """The lease ``job``'s row shows; ``worker`` or ``attempt`` name another holder or
    another attempt of it (a stranger's lease, a stale one)."""
    holder = worker or job.locked_by_worker
    assert holder is not None, f"job {job.id} has no worker: name one"
    return Lease(job.id, holder, job.attempt if attempt is None else attempt)


async def running_job(
    backend: Backend,
    *,
    worker: UUID | None = None,
    lease: timedelta = LEASE,
    started: bool = True,
    **fields: Any,
) -> tuple[JobRow, UUID]:
    """Enqueue a job in a queue of its own and dispatch it; returns (running row, worker).

    ``started`` (the default) records its body's start as a worker does when a consumer takes
    it; ``started=False`` leaves it claimed (started_at None), as a prefetched job waits.
    """
    fields.setdefault("queue", new_queue())
    job = await backend.enqueue(args(**fields))
    worker = worker or uuid4()
    claimed = await backend.dispatch_batch(worker, [job.queue], 1, lease)
    assert [row.id for row in claimed] == [job.id]
    if not started:
        return claimed[0], worker
    assert await backend.mark_started_many(worker, [Start(job.id, claimed[0].attempt)]) == {job.id}
    return await reload(backend, job.id), worker


async def job_in(harness: Harness, status: JobStatus, **fields: Any) -> tuple[JobRow, UUID | None]:
    """A job in ``status``, reached only through protocol calls, and the worker that ran it."""
    backend = harness.backend
    if status is JobStatus.PENDING:
        return await backend.enqueue(args(queue=new_queue(), **fields)), None
    if status is JobStatus.SCHEDULED:
        delayed = args(queue=new_queue(), delay=timedelta(hours=1), **fields)
        return await backend.enqueue(delayed), None
    if status is JobStatus.WAITING:
        return await waiting_step(backend, **fields), None
    if status is JobStatus.CANCELLED:
        job = await backend.enqueue(args(queue=new_queue(), **fields))
        assert await backend.write_cancel_request(job.id, "test") == "cancelled"
        return await reload(backend, job.id), None
    if status is JobStatus.CRASHED:
        fields.setdefault("retry_kind", "non_retryable")
    job, worker = await running_job(backend, **fields)
    held = job.lease()
    if status is JobStatus.SUCCEEDED:
        assert await backend.mark_succeeded(held, {"ok": True})
    elif status is JobStatus.FAILED:
        assert await backend.mark_failed_or_retry(held, BOOM, None) is not None
    elif status is JobStatus.CRASHED:
        assert await backend.release_leases(worker, [held], reason="test") == 1
    elif status is JobStatus.ABANDONED:
        assert await backend.write_cancel_request(job.id, "test") == "requested"
        assert await backend.write_cancel_escalation(held)
        assert await backend.mark_abandoned(held, "test")
    row = await reload(backend, job.id)
    assert row.status is status
    return row, worker


async def waiting_step(backend: Backend, after: UUID | None = None, **fields: Any) -> JobRow:
    """A workflow step waiting for its one dependency: job ``after``, else a pending job (in
    a queue of its own) made with it."""
    fields.setdefault("queue", new_queue())
    workflow_id = uuid7()

    def step(name: str, *after: UUID, **more: Any) -> NewStep:
        metadata = {WORKFLOW_ID_KEY: str(workflow_id), WORKFLOW_STEP_KEY: name}
        made = args(job_id=uuid7(), metadata=metadata, waiting=bool(after), **more)
        return NewStep(made, name, after)

    if after is not None:
        child = step("child", after, **fields)
        [row] = await backend.create_workflow(NewWorkflow(workflow_id), [child])
        return row
    parent = step("parent", queue=new_queue())
    assert parent.args.job_id is not None
    child = step("child", parent.args.job_id, **fields)
    rows = await backend.create_workflow(NewWorkflow(workflow_id), [parent, child])
    return rows[1]


async def released_on_a_failure(backend: Backend, **fields: Any) -> JobRow:
    """A workflow step that requires only its one dependency's end, released when that
    dependency failed for good: pending, or scheduled with a ``delay`` still ahead."""
    queue, workflow_id, parent_id = new_queue(), uuid7(), uuid7()

    def metadata(name: str, **more: str) -> dict[str, str]:
        return {WORKFLOW_ID_KEY: str(workflow_id), WORKFLOW_STEP_KEY: name, **more}

    fields.setdefault("queue", new_queue())
    parent = NewStep(args(job_id=parent_id, queue=queue, metadata=metadata("parent")), "parent")
    finished = {WORKFLOW_REQUIRES_KEY: "finished"}
    made = args(job_id=uuid7(), metadata=metadata("child", **finished), waiting=True, **fields)
    await backend.create_workflow(
        NewWorkflow(workflow_id), [parent, NewStep(made, "child", (parent_id,))]
    )
    worker = uuid4()
    [claimed] = await backend.dispatch_batch(worker, [queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(claimed.id, claimed.attempt)])
    assert await backend.mark_failed_or_retry(claimed.lease(), BOOM, None) is not None
    await backend.release_workflow_steps([claimed.id])
    assert made.job_id is not None
    return await reload(backend, made.job_id)


async def reload(backend: Backend, job_id: UUID) -> JobRow:
    """The job's current row (it must exist)."""
    row = await backend.get(job_id)
    assert row is not None
    return row


async def cap_actor(backend: Backend, actor: str, max_concurrent: int | None) -> None:
    """Give ``actor`` an actor_config row with this max_concurrent."""
    await backend.sync_actor_configs(
        [ActorDeclaration(actor, "default", {}, max_concurrent, None, None)], force=False
    )
    await backend.update_actor_config(actor, max_concurrent=max_concurrent)


async def wait_set(event: asyncio.Event) -> None:
    """Wait (bounded) for a wake-up event."""
    async with asyncio.timeout(WAKE_TIMEOUT):
        await event.wait()


def between(value: datetime | None, low: datetime, high: datetime) -> bool:
    """``low <= value <= high``, for timestamps the backend stamped on its own clock."""
    return value is not None and low <= value <= high
