"""The jobs this worker is executing right now, with their in-process cancel state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import IntEnum
from typing import Any
from uuid import UUID

from taskq_core.actors import JobContext
from taskq_core.backend.protocol import JobRow


class CancelPhase(IntEnum):
    """Cancel progress of one job. ABANDON_PENDING never reaches the database."""

    NONE = 0
    COOPERATIVE = 1
    FORCED = 2
    ABANDON_PENDING = 3


@dataclass
class ActiveJob:
    """One executing job: its row, context, the task running the actor and its cancel state."""

    job: JobRow
    ctx: JobContext[Any]
    task: asyncio.Task[Any] | None = None
    cancel_phase: CancelPhase = CancelPhase.NONE
    cancel_observed_at: float | None = None
    cancel_reason: str = "requested"  # requested | shutdown
    started_monotonic: float = 0.0
    settled: asyncio.Future[None] | None = None  # the consumer waits on it

    def abandon(self) -> None:
        """Release the waiting consumer: its task ended, or ignored even the forced cancel."""
        if self.settled is not None and not self.settled.done():
            self.settled.set_result(None)


class ActiveJobs:
    """Registry of executing jobs; ``idle`` is set whenever none runs."""

    def __init__(self) -> None:
        self._jobs: dict[UUID, ActiveJob] = {}
        self.idle = asyncio.Event()
        self.idle.set()
        self.slot_freed = asyncio.Event()

    def add(self, active: ActiveJob) -> None:
        """Start tracking a job."""
        self._jobs[active.job.id] = active
        self.idle.clear()

    def remove(self, job_id: UUID) -> None:
        """Stop tracking a job (idempotent)."""
        self._jobs.pop(job_id, None)
        self.slot_freed.set()
        if not self._jobs:
            self.idle.set()

    def get(self, job_id: UUID) -> ActiveJob | None:
        """The tracked job, if any."""
        return self._jobs.get(job_id)

    def all(self) -> list[ActiveJob]:
        """A snapshot of every tracked job."""
        return list(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)
