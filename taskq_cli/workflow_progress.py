"""How a workflow reads for an operator, in the shell, in ``taskq top`` and in a job's page.

A workflow's row carries its steps' counts by status; its steps are jobs whose metadata
names the workflow and the step. These values and documents are what ``taskq workflows``
prints (``--json`` field names are the CLI's contract) and what a step's ``jobs show``
adds: the workflow's state, and for a waiting step the dependencies it waits for. No rich,
typer or Textual here: the commands and the dashboards render these values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import JobRow
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_STEP_KEY,
    Decision,
    Requires,
    StepDependency,
    WorkflowBackend,
    WorkflowRow,
    WorkflowStatus,
    WorkflowStep,
    requires_of,
    workflow_id_of,
)
from taskq_core.errors import ConfigError, TaskqError
from taskq_core.explain.workflow import (
    dependency_document,
    not_ended,
    release_decision,
    waiting_text,
)
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

# Steps that ended without success and without a cancel.
FAILED_STATUSES = (JobStatus.FAILED, JobStatus.CRASHED, JobStatus.ABANDONED)
# Steps released to dispatch, not yet claimed.
DUE_STATUSES = (JobStatus.PENDING, JobStatus.SCHEDULED)
WORKFLOW_STATUSES = tuple(status.value for status in WorkflowStatus)
# The order steps are counted in by status: those to come, then those that ended.
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
# A step whose workflow's row is gone.
NO_ROW = "no workflow row (it was pruned)"


class WorkflowNotFoundError(TaskqError):
    """No workflow has that id."""


def parse_workflow_status(text: str | None, field: str = "--status") -> WorkflowStatus | None:
    """A workflow status as an operator types it; ConfigError naming the choices."""
    if text is None:
        return None
    try:
        return WorkflowStatus(text.strip().lower())
    except ValueError:
        choices = ", ".join(WORKFLOW_STATUSES)
        raise ConfigError(f"{field}: unknown workflow status {text!r} (use {choices})") from None


def count_of(counts: Mapping[JobStatus, int], statuses: tuple[JobStatus, ...]) -> int:
    return sum(counts.get(status, 0) for status in statuses)


def by_status(row: WorkflowRow) -> dict[str, int]:
    """The steps' counts by status, in ``STEP_STATUSES`` order, those with none left out."""
    return {status.value: row.counts[status] for status in STEP_STATUSES if row.counts.get(status)}


def ended(row: WorkflowRow) -> int:
    """Steps that ended (any terminal status)."""
    return sum(n for status, n in row.counts.items() if status in TERMINAL_STATUSES)


def steps_text(row: WorkflowRow) -> str:
    """``3 of 5 steps ended (1 failed, 1 cancelled)``."""
    extra = [
        f"{count} {label}"
        for count, label in (
            (count_of(row.counts, FAILED_STATUSES), "failed"),
            (row.counts.get(JobStatus.CANCELLED, 0), "cancelled"),
        )
        if count
    ]
    text = f"{ended(row)} of {row.total} steps ended"
    return text + (f" ({', '.join(extra)})" if extra else "")


def summary(row: WorkflowRow) -> str:
    """``nightly-etl: running, 3 of 5 steps ended (1 failed)`` (the name when it has one)."""
    head = f"{row.name}: " if row.name else ""
    return f"{head}{row.status.value}, {steps_text(row)}"


def counts_document(row: WorkflowRow) -> dict[str, Any]:
    """The steps' counts for ``--json``: total, ended, and by status."""
    return {
        "total": row.total,
        "ended": ended(row),
        "by_status": by_status(row),
    }


def workflow_document(row: WorkflowRow) -> dict[str, Any]:
    """A workflow for ``--json`` (``workflows list``, ``show``)."""
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
        "cancel_requested_at": row.cancel_requested_at,
        "counts": counts_document(row),
        "metadata": row.metadata,
    }


def waiting_for(step: WorkflowStep, by_name: Mapping[str, WorkflowStep]) -> list[str]:
    """The dependencies of a waiting step that have not ended (none for other steps)."""
    if step.status is not JobStatus.WAITING:
        return []
    return [
        name
        for name in step.after
        if name not in by_name or by_name[name].status not in TERMINAL_STATUSES
    ]


def step_document(step: WorkflowStep, by_name: Mapping[str, WorkflowStep]) -> dict[str, Any]:
    """One step for ``workflows show --json``."""
    return {
        "name": step.name,
        "job_id": step.job_id,
        "actor": step.actor,
        "queue": step.queue,
        "status": step.status,
        "requires": step.requires,
        "after": list(step.after),
        "waiting_for": waiting_for(step, by_name),
        "attempt": step.attempt,
        "created_at": step.created_at,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "error_class": step.error_class,
        "error_message": step.error_message,
        "cancel_reason": step.cancel_reason,
    }


def dashboard_workflows(
    running: list[WorkflowRow], newest: list[WorkflowRow], limit: int, ended_since: datetime
) -> tuple[list[WorkflowRow], bool]:
    """What a dashboard lists: the running workflows (up to ``limit``), then, while there is
    room, those among ``newest`` that ended since ``ended_since``; and whether more are
    running than the ``limit``."""
    shown = running[:limit]
    recent = [
        row for row in newest if row.finished_at is not None and row.finished_at >= ended_since
    ]
    return shown + recent[: limit - len(shown)], len(running) > limit


@dataclass(frozen=True)
class JobWorkflow:
    """A job's place in a workflow: the workflow (None: its row is gone), the step's name
    and terms, its dependencies with their statuses now (in name order), and whether it
    waits for them."""

    workflow_id: UUID
    step: str
    requires: Requires
    row: WorkflowRow | None
    dependencies: tuple[StepDependency, ...] = ()
    waiting: bool = False

    def field(self) -> str:
        """The ``workflow`` field: the workflow's state."""
        if self.row is None:
            return f"{self.workflow_id}: {NO_ROW}"
        return summary(self.row)

    def release(self) -> Decision | None:
        """What a release would do with the waiting step now; None for other steps."""
        return release_decision(self.dependencies, self.requires) if self.waiting else None

    def waiting_for(self) -> list[StepDependency] | None:
        """A waiting step's dependencies not yet ended; None for other steps."""
        return not_ended(self.dependencies) if self.waiting else None

    def waits_for(self) -> str | None:
        """What a waiting step waits for and on what terms; None for other steps."""
        return waiting_text(self.dependencies, self.requires) if self.waiting else None

    def document(self) -> dict[str, Any]:
        """For ``jobs show --json`` and the web UI's job API: the workflow, the step, its
        dependencies, and for a waiting step what a release would do and what it waits for."""
        waiting = self.waiting_for()
        return {
            "id": self.workflow_id,
            "name": None if self.row is None else self.row.name,
            "status": None if self.row is None else self.row.status,
            "step": self.step,
            "requires": self.requires,
            "after": [dependency_document(dep) for dep in self.dependencies],
            "release": self.release(),
            "waiting_for": None
            if waiting is None
            else [dependency_document(dep) for dep in waiting],
        }


async def read_job_workflow(backend: WorkflowBackend, job: JobRow) -> JobWorkflow | None:
    """The workflow ``job`` is a step of, with its dependencies (their statuses, not their
    results); None (no read at all) for a job outside any workflow."""
    workflow_id = workflow_id_of(job.metadata)
    if workflow_id is None:
        return None
    row, dependencies = await asyncio.gather(
        backend.get_workflow(workflow_id), backend.list_step_dependencies(job.id)
    )
    return JobWorkflow(
        workflow_id,
        str(job.metadata.get(WORKFLOW_STEP_KEY, job.id)),
        requires_of(job.metadata),
        row,
        tuple(dependencies),
        job.status is JobStatus.WAITING,
    )
