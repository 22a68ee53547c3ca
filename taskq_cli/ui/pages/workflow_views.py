"""What the workflow pages show, as pydantic models: the JSON under ``/api/workflows`` and
the values the templates render are the same objects.

``WorkflowSummary`` is a row of the list (the workflow and its steps' counts by status),
``WorkflowDetailView`` one workflow with its steps and their dependencies. What a step's job
page says of its workflow is ``job_views.JobWorkflowView``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from taskq_cli.ui.pages.job_views import error_line
from taskq_core.backend.protocol.workflows import WorkflowRow, WorkflowStep
from taskq_core.statemachine import JobStatus

# The order the steps' statuses are counted in: those to come, then those that ended.
STEP_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.WAITING,
    JobStatus.SCHEDULED,
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CRASHED,
    JobStatus.ABANDONED,
    JobStatus.CANCELLED,
)


class WorkflowSummary(BaseModel):
    """A workflow: its name (None: not named), status (running, succeeded, failed,
    cancelled), when it was created and ended, and its steps counted by status."""

    id: UUID
    name: str | None
    status: str
    created_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    steps: int
    by_status: dict[str, int]

    @classmethod
    def of(cls, row: WorkflowRow) -> WorkflowSummary:
        return cls(
            id=row.id,
            name=row.name,
            status=row.status.value,
            created_at=row.created_at,
            finished_at=row.finished_at,
            cancel_requested_at=row.cancel_requested_at,
            steps=row.total,
            by_status={s.value: row.counts[s] for s in STEP_STATUSES if row.counts.get(s)},
        )


class WorkflowsView(BaseModel):
    """The newest workflows the filter selects; ``more``: older ones match too (a larger
    ``limit`` shows them)."""

    workflows: list[WorkflowSummary]
    count: int
    more: bool


class WorkflowStepView(BaseModel):
    """One step: its name, its job (actor, queue, status, attempt), what it requires of its
    dependencies (``succeeded``, or ``finished``: any outcome) and their names (``after``),
    and how it ended (``error``: the class and the first line of the message)."""

    name: str
    job_id: UUID
    actor: str
    queue: str
    status: str
    requires: str
    after: list[str]
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_class: str | None
    error_message: str | None
    error: str | None
    cancel_reason: str | None

    @classmethod
    def of(cls, step: WorkflowStep) -> WorkflowStepView:
        return cls(
            name=step.name,
            job_id=step.job_id,
            actor=step.actor,
            queue=step.queue,
            status=step.status.value,
            requires=step.requires,
            after=list(step.after),
            attempt=step.attempt,
            created_at=step.created_at,
            started_at=step.started_at,
            finished_at=step.finished_at,
            error_class=step.error_class,
            error_message=step.error_message,
            error=error_line(step.error_class, step.error_message),
            cancel_reason=step.cancel_reason,
        )


class WorkflowDetailView(BaseModel):
    """One workflow, its metadata and its steps in the order they were added (a step's
    ``after`` names the steps it depends on)."""

    workflow: WorkflowSummary
    metadata: dict[str, Any]
    steps: list[WorkflowStepView]

    @classmethod
    def of(cls, row: WorkflowRow, steps: list[WorkflowStep]) -> WorkflowDetailView:
        return cls(
            workflow=WorkflowSummary.of(row),
            metadata=row.metadata,
            steps=[WorkflowStepView.of(step) for step in steps],
        )
