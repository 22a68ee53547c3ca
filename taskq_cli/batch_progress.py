"""How a batch's progress reads for an operator, in the shell and in ``taskq top``.

A batch's children carry ``metadata.batch_id``, its finalizer ``metadata.finalizes_batch``.
Progress is counted from the jobs table: children pruned to the archive are terminal, so a
batch with a row counts every child its row expects that is not pending, scheduled or
running as done. A batch without a row (a plain tagged batch, or one whose row was pruned)
only knows the children still in the jobs table. No rich, typer or Textual here: the
commands and the dashboard both render these values.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from taskq_core.backend.protocol.batches import (
    FINALIZES_KEY,
    BatchBackend,
    BatchCounts,
    BatchRow,
    batch_id_of,
)
from taskq_core.statemachine import JobStatus

# What counts as failed in a summary: every terminal status but success and cancel.
FAILED_STATUSES = (JobStatus.FAILED, JobStatus.CRASHED, JobStatus.ABANDONED)
# A batch whose row is gone (or never existed) reads as this status.
UNTRACKED = "untracked"

BatchRole = Literal["child", "finalizer"]


@dataclass(frozen=True)
class BatchProgress:
    """A batch's row (None: no row) and its children's counts in the jobs table."""

    batch_id: UUID
    row: BatchRow | None
    counts: BatchCounts

    @property
    def status(self) -> str:
        """``active``, ``complete``, ``aborted``, or ``untracked`` without a row."""
        return UNTRACKED if self.row is None else self.row.status.value

    @property
    def total(self) -> int:
        """The children: as many as the row expects (or more, if more were counted)."""
        if self.row is None:
            return self.counts.total
        return max(self.row.expected_size, self.counts.total)

    @property
    def done(self) -> int:
        """Children no longer pending, scheduled or running (archived ones included)."""
        return self.total - self.counts.pending

    @property
    def failed(self) -> int:
        """Children that failed, crashed or were abandoned."""
        return sum(self.counts.of(status) for status in FAILED_STATUSES)

    @property
    def cancelled(self) -> int:
        """Children cancelled (by an operator, or by the batch's abort)."""
        return self.counts.of(JobStatus.CANCELLED)

    @property
    def archived(self) -> int:
        """Children the row expects that the jobs table no longer holds (pruned)."""
        return self.total - self.counts.total

    def children_text(self) -> str:
        """``12 of 40 done (3 failed, 1 cancelled)``."""
        extra = [
            f"{count} {label}"
            for count, label in ((self.failed, "failed"), (self.cancelled, "cancelled"))
            if count
        ]
        text = f"{self.done} of {self.total} done"
        return text + (f" ({', '.join(extra)})" if extra else "")

    def summary(self) -> str:
        """``active, 12 of 40 done (3 failed, 1 cancelled)``."""
        return f"{self.status}, {self.children_text()}"

    def failures_text(self) -> str | None:
        """``2/5``: consecutive failures of the abort threshold; None without a policy."""
        if self.row is None or self.row.failure_threshold is None:
            return None
        return f"{self.row.consecutive_failures}/{self.row.failure_threshold}"

    def document(self) -> dict[str, Any]:
        """The batch for ``--json``: the row's fields and the children's counts."""
        row = self.row
        finalizer = None
        if row is not None and row.finalizer_actor is not None:
            finalizer = {"actor": row.finalizer_actor, "job_id": row.finalizer_job_id}
        return {
            "id": self.batch_id,
            "queue": None if row is None else row.queue,
            "status": self.status,
            "expected_size": None if row is None else row.expected_size,
            "children": {
                "total": self.total,
                "done": self.done,
                "pending": self.counts.pending,
                "failed": self.failed,
                "cancelled": self.cancelled,
                "archived": self.archived,
                "by_status": {s.value: n for s, n in sorted(self.counts.by_status.items())},
            },
            "consecutive_failures": None if row is None else row.consecutive_failures,
            "failure_threshold": None if row is None else row.failure_threshold,
            "finalizer": finalizer,
            "created_at": None if row is None else row.created_at,
            "completed_at": None if row is None else row.completed_at,
            "metadata": None if row is None else row.metadata,
        }


@dataclass(frozen=True)
class JobBatch:
    """A job's place in a batch: one of its children, or its finalizer."""

    role: BatchRole
    progress: BatchProgress

    def line(self) -> str:
        """``batch ID: active, 12 of 40 done`` or ``finalizer of batch ID: complete, ...``."""
        head = "batch" if self.role == "child" else "finalizer of batch"
        return f"{head} {self.progress.batch_id}: {self.progress.summary()}"

    def field(self) -> str:
        """The line as the value of a ``batch`` field (the field's name says "batch")."""
        return self.line().removeprefix("batch ")

    def document(self) -> dict[str, Any]:
        """For ``jobs show --json``: the role and the batch."""
        return {"role": self.role, **self.progress.document()}


def job_batch_ref(metadata: dict[str, Any] | None) -> tuple[BatchRole, UUID] | None:
    """Which batch a job's metadata names, and as what (None: no batch)."""
    child = batch_id_of(metadata)
    if child is not None:
        return "child", child
    finalizes = batch_id_of({"batch_id": (metadata or {}).get(FINALIZES_KEY)})
    return None if finalizes is None else ("finalizer", finalizes)


async def read_progress(backend: BatchBackend, batch_id: UUID) -> BatchProgress:
    """One batch's row and counts (two reads, side by side)."""
    row, counts = await asyncio.gather(
        backend.get_batch(batch_id), backend.count_batch_jobs(batch_id)
    )
    return BatchProgress(batch_id, row, counts)


async def read_job_batch(backend: BatchBackend, metadata: dict[str, Any]) -> JobBatch | None:
    """The batch a job belongs to or finalizes, with its progress; None for other jobs (no
    read at all)."""
    ref = job_batch_ref(metadata)
    if ref is None:
        return None
    role, batch_id = ref
    return JobBatch(role, await read_progress(backend, batch_id))
