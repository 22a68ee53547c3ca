"""What the workflow pages show, as pydantic models: the JSON under ``/api/workflows`` and
the values the templates render are the same objects. Each is validated from the documents
of ``taskq workflows list|show --json`` (``taskq_cli/workflow_progress.py``), as the jobs
pages' models are from ``jobs show --json``'s, and declares which of their fields the API
exposes.

``WorkflowSummary`` is a row of the list (the workflow and its steps' counts by status),
``WorkflowDetailView`` one workflow with its steps and their dependencies. What a step's job
page says of its workflow is ``job_views.JobWorkflowView``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from taskq_cli.ui.pages.job_views import error_line
from taskq_cli.workflow_progress import by_status, step_document, workflow_document
from taskq_core.backend.protocol.workflows import WorkflowRow, WorkflowStep


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
        return cls.model_validate(
            {**workflow_document(row), "steps": row.total, "by_status": by_status(row)}
        )


class WorkflowsView(BaseModel):
    """The newest workflows the filter selects; ``more``: older ones match too (a larger
    ``limit`` shows them)."""

    workflows: list[WorkflowSummary]
    count: int
    more: bool


# The fields repeat WorkflowStep's on purpose: an API model declares what its JSON and its
# OpenAPI schema carry; the values come from the CLI's step_document.
class WorkflowStepView(BaseModel):
    """One step: its name, its job (actor, queue, status, attempt), what it requires of its
    dependencies (``succeeded``, or ``finished``: any outcome), their names (``after``) and,
    while it waits, those not yet ended (``waiting_for``), and how it ended (``error``: the
    class and the first line of the message)."""

    name: str
    job_id: UUID
    actor: str
    queue: str
    status: str
    requires: str
    after: list[str]
    waiting_for: list[str]
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_class: str | None
    error_message: str | None
    error: str | None
    cancel_reason: str | None

    @classmethod
    def of(cls, step: WorkflowStep, by_name: Mapping[str, WorkflowStep]) -> WorkflowStepView:
        return cls.model_validate(
            {
                **step_document(step, by_name),
                "error": error_line(step.error_class, step.error_message),
            }
        )


class WorkflowDetailView(BaseModel):
    """One workflow, its metadata and its steps in the order they were added (a step's
    ``after`` names the steps it depends on)."""

    workflow: WorkflowSummary
    metadata: dict[str, Any]
    steps: list[WorkflowStepView]

    @classmethod
    def of(cls, row: WorkflowRow, steps: list[WorkflowStep]) -> WorkflowDetailView:
        by_name = {step.name: step for step in steps}
        return cls(
            workflow=WorkflowSummary.of(row),
            metadata=row.metadata,
            steps=[WorkflowStepView.of(step, by_name) for step in steps],
        )
