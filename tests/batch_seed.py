"""Batches written through the Backend protocol alone, for the CLI and dashboard tests.

``make_batch`` creates a batch row and its children as the client does (children carry
``metadata.batch_id``, the finalizer ``metadata.finalizes_batch``); ``settle_child`` runs
one child to its end as a worker would, then the batch hook, as the worker's settle does.
Works on either backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal
from uuid import UUID, uuid4

from taskq_core.backend.protocol import Backend, EnqueueArgs, ErrorInfo, JobRow
from taskq_core.backend.protocol.batches import (
    BATCH_ID_KEY,
    FINALIZES_KEY,
    BatchOutcome,
    BatchTransition,
    NewBatch,
)
from taskq_core.statemachine import JobStatus

LEASE = timedelta(minutes=5)
CHILD_ACTOR = "resize"


@dataclass
class SeededBatch:
    """What ``make_batch`` created."""

    id: UUID
    queue: str
    children: list[JobRow] = field(default_factory=list)
    finalizer_job_id: UUID | None = None


async def make_batch(
    backend: Backend,
    *,
    queue: str = "batchq",
    size: int = 4,
    threshold: int | None = None,
    finalizer: str | None = "notify_done",
    metadata: dict[str, Any] | None = None,
) -> SeededBatch:
    """A batch row (active) and ``size`` pending children on ``queue``, each failing for
    good at its first failure."""
    batch_id = uuid4()
    finalizer_args = None
    if finalizer is not None:
        finalizer_args = EnqueueArgs(
            actor=finalizer,
            queue=queue,
            job_id=uuid4(),
            metadata={FINALIZES_KEY: str(batch_id)},
        )
    await backend.create_batch(
        NewBatch(batch_id, queue, size, threshold, finalizer_args, metadata or {})
    )
    seeded = SeededBatch(
        batch_id, queue, finalizer_job_id=None if finalizer_args is None else finalizer_args.job_id
    )
    for _ in range(size):
        child = EnqueueArgs(
            actor=CHILD_ACTOR, queue=queue, max_attempts=1, metadata={BATCH_ID_KEY: str(batch_id)}
        )
        seeded.children.append(await backend.enqueue(child))
    return seeded


async def settle_child(
    backend: Backend,
    batch: SeededBatch,
    outcome: Literal["succeeded", "failed"],
    *,
    error: str = "the upstream image server answered 503",
) -> tuple[JobRow, list[BatchTransition]]:
    """Claim one waiting child of ``batch``, end it with ``outcome``, run the batch hook:
    the child as it ended and the batches that left ``active``."""
    claimed = await backend.dispatch_batch(uuid4(), [batch.queue], 1, LEASE)
    assert len(claimed) == 1, "the batch has no waiting child left"
    lease = claimed[0].lease()
    if outcome == "succeeded":
        await backend.mark_succeeded(lease, {"ok": True})
        status = JobStatus.SUCCEEDED
    else:
        info = ErrorInfo("ConnectionError", error, "Traceback: boom")
        await backend.mark_failed_or_retry(lease, info, None, ran_for=0.0)
        status = JobStatus.FAILED
    transitions = await backend.apply_batch_outcomes([BatchOutcome(batch.id, status)])
    row = await backend.get(claimed[0].id)
    assert row is not None and row.status is status, row
    return row, transitions
