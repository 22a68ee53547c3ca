"""What the jobs pages show of a job, as pydantic models: the JSON under ``/api/`` and the
values the templates render are the same objects. Each model is validated from the job's
documents in ``taskq_cli/job_documents.py`` (those of ``taskq jobs show --json``) and
declares which of their fields the API exposes.

``JobLine`` is a row of the jobs list; ``JobDetailView`` is everything on a job's page: the
row, its attempts and events, the ``jobs explain`` answer, its batch, the workflow it is a
step of (``JobWorkflowView``: what a waiting step waits for) and, for a job the prune moved
to the archive, when that happened (its events were deleted then, by design).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel

from taskq_cli.batch_progress import BatchProgress, JobBatch
from taskq_cli.dashboard.snapshot import JobDetail
from taskq_cli.explain_verdict import job_state, verdict_label
from taskq_cli.job_documents import (
    archived_document,
    attempt_document,
    event_document,
    job_document,
    job_summary,
)
from taskq_cli.workflow_progress import NO_ROW, JobWorkflow, steps_text
from taskq_core.backend.protocol import ArchivedJob, AttemptRow, EventRow, JobRow, JobSummary
from taskq_core.backend.protocol.batches import batch_id_of
from taskq_core.backend.protocol.workflows import Decision
from taskq_core.explain import Explanation, job_origin
from taskq_core.explain.workflow import release_terms, waiting_for_text
from taskq_core.progress import ProgressReport
from taskq_core.statemachine import ACTIVE_STATUSES, RETRYABLE_STATUSES


def first_line(text: str | None) -> str | None:
    """The first non-blank line of an error message (None for none)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def error_line(error_class: str | None, message: str | None) -> str | None:
    """An error on one line: its class and the first line of its message."""
    if error_class is None:
        return None
    line = first_line(message)
    return f"{error_class}: {line}" if line else error_class


class JobLine(BaseModel):
    """A job as the list shows it. ``claimed``: running in the database but its body has
    not started; ``error``: the error's class and the first line of its message."""

    id: UUID
    actor: str
    queue: str
    status: str
    claimed: bool
    attempt: int  # the last claim's number
    attempts_used: int  # of the retry budget, a claim whose body has not started included
    attempts_spent: int  # as every view shows it: that claim not counted
    max_attempts: int
    attempt_budget: int  # what the policy runs: 1 for a non_retryable job
    priority: int
    created_at: datetime
    scheduled_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_class: str | None
    error: str | None
    batch_id: UUID | None

    @classmethod
    def of(cls, job: JobSummary) -> JobLine:
        """The listing's fields of ``job_summary`` (the CLI's), with the error on one line
        and the batch the job belongs to."""
        return cls.model_validate(
            {
                **job_summary(job),
                "error": error_line(job.error_class, job.error_message),
                "batch_id": batch_id_of(job.metadata),
            }
        )


class ProgressView(BaseModel):
    """The latest progress a running job reported (``ctx.report_progress``): ``current``
    of ``total`` (None: no total known), ``percent`` of it, a message, and when (the
    reporting worker's clock)."""

    seq: int
    current: float
    total: float | None
    percent: float | None
    message: str | None
    reported_at: datetime

    # Alike the pages' other ``of`` (queues.QueueView, schedules.ScheduleView,
    # workers.WorkerItem) by shape only: each copies its own record's fields into its model.
    @classmethod
    def of(cls, job: JobRow) -> ProgressView | None:
        """The report stored on the row; None when there is none."""
        report = ProgressReport.of_row(job)
        if report is None:
            return None
        return cls(
            seq=report.seq,
            current=report.current,
            total=report.total,
            percent=report.percent,
            message=report.message,
            reported_at=report.ts,
        )


# JobView repeats JobLine's fields on purpose rather than extending it: each model's field
# order is the order of its /api JSON, and the two orders differ.
class JobView(BaseModel):
    """Every field of a job an operator reads, payload and result included."""

    id: UUID
    actor: str
    queue: str
    status: str
    claimed: bool
    attempt: int  # the last claim's number
    attempts_used: int  # of the retry budget, a claim whose body has not started included
    attempts_spent: int  # as every view shows it: that claim not counted
    max_attempts: int
    attempt_budget: int  # what the policy runs: 1 for a non_retryable job
    retry_kind: str
    priority: int
    origin: str | None
    created_at: datetime
    scheduled_at: datetime
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    locked_by_worker: UUID | None
    lock_expires_at: datetime | None
    identity_key: str | None
    fairness_key: str | None
    unique_key: str | None
    schedule_to_close: datetime | None
    cancel_phase: int
    cancel_requested_at: datetime | None
    cancel_reason: str | None
    payload: dict[str, Any]
    result: Any
    result_expires_at: datetime | None
    error_class: str | None
    error_message: str | None
    error_traceback: str | None
    metadata: dict[str, Any]
    trace_id: str | None
    progress: ProgressView | None

    @classmethod
    def of(cls, job: JobRow) -> JobView:
        """The fields of ``job_document`` (the CLI's) this page shows, with where the job
        came from and its progress."""
        return cls.model_validate(
            {
                **job_document(job),
                "origin": job_origin(job),
                "progress": ProgressView.of(job),
            }
        )


class AttemptView(BaseModel):
    """One finished attempt: how it ended, on which worker, how long, with what error."""

    attempt: int
    outcome: str
    worker_id: UUID | None
    started_at: datetime | None
    finished_at: datetime
    duration_ms: float | None
    error_class: str | None
    error_message: str | None
    error_traceback: str | None

    @classmethod
    def of(cls, attempt: AttemptRow) -> AttemptView:
        return cls.model_validate(attempt_document(attempt))


class EventView(BaseModel):
    """One event of the timeline: a status change, a cancel request or a reclaim."""

    id: int
    occurred_at: datetime
    kind: str
    from_status: str | None
    to_status: str | None
    worker_id: UUID | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, event: EventRow) -> EventView:
        return cls.model_validate(event_document(event))


class CheckView(BaseModel):
    """One blocker ``jobs explain`` checks (``code`` is stable), and whether it applies."""

    code: str
    applies: bool
    message: str


class ExplanationView(BaseModel):
    """The ``taskq jobs explain`` answer: what the job is (``state``: its status, or
    ``claimed by worker W, waiting for a free consumer``), the verdict in one word (blocked,
    runnable, stuck, claimed, running, finished, archived) and words, and for a waiting job
    every check in dispatch order."""

    situation: str
    state: str
    label: str
    code: str
    message: str
    checks: list[CheckView]

    @classmethod
    def of(cls, explanation: Explanation) -> ExplanationView:
        verdict = explanation.verdict
        waiting = explanation.situation == "waiting"
        return cls(
            situation=explanation.situation,
            state=job_state(explanation),
            label=verdict_label(explanation),
            code=verdict.code,
            message=verdict.message,
            checks=[
                CheckView(code=c.code, applies=c.applies, message=c.message)
                for c in (explanation.checks if waiting else [])
            ],
        )


class BatchSummary(BaseModel):
    """A batch's progress: its status (active, complete, aborted; untracked without a row),
    its children done of total, failed, cancelled, and archived (pruned); ``children`` and
    ``summary`` say it in words (``12 of 40 done (3 failed)``, with the status first)."""

    id: UUID
    queue: str | None
    status: str
    total: int
    done: int
    failed: int
    cancelled: int
    archived: int
    by_status: dict[str, int]
    consecutive_failures: int | None
    failure_threshold: int | None
    finalizer_actor: str | None
    finalizer_job_id: UUID | None
    created_at: datetime | None
    completed_at: datetime | None
    children: str
    summary: str

    # Alike limits.LimitView by shape only: fields, then an ``of`` copying its own record's.
    @classmethod
    def of(cls, progress: BatchProgress) -> BatchSummary:
        row = progress.row
        return cls(
            id=progress.batch_id,
            queue=None if row is None else row.queue,
            status=progress.status,
            total=progress.total,
            done=progress.done,
            failed=progress.failed,
            cancelled=progress.cancelled,
            archived=progress.archived,
            by_status={s.value: n for s, n in sorted(progress.counts.by_status.items())},
            consecutive_failures=None if row is None else row.consecutive_failures,
            failure_threshold=None if row is None else row.failure_threshold,
            finalizer_actor=None if row is None else row.finalizer_actor,
            finalizer_job_id=None if row is None else row.finalizer_job_id,
            created_at=None if row is None else row.created_at,
            completed_at=None if row is None else row.completed_at,
            children=progress.children_text(),
            summary=progress.summary(),
        )


class JobBatchView(BaseModel):
    """The batch a job belongs to (``child``) or finalizes (``finalizer``)."""

    role: Literal["child", "finalizer"]
    batch: BatchSummary

    @classmethod
    def of(cls, batch: JobBatch) -> JobBatchView:
        return cls(role=batch.role, batch=BatchSummary.of(batch.progress))


class ArchivedView(BaseModel):
    """When the prune moved the job to the archive and when the archive deletes it; its
    events were deleted then (by design), its attempts kept."""

    archived_at: datetime
    expire_at: datetime
    events_deleted: bool = True

    @classmethod
    def of(cls, archived: ArchivedJob) -> ArchivedView:
        return cls.model_validate(archived_document(archived))


class DependencyView(BaseModel):
    """A dependency of a workflow step: its step name, its job and that job's status now."""

    step: str
    job_id: UUID
    status: str


class JobWorkflowView(BaseModel):
    """The workflow a job is a step of, as ``jobs show --json`` prints it (``status`` None:
    the workflow's row is gone): the step, what it requires of its dependencies
    (``succeeded``, or ``finished``: any outcome), the dependencies with their statuses now
    (``after``), and for a waiting step what a release would do now (``release``,
    ``decide_step``'s answer) and the dependencies it waits for (``waiting_for``: those not
    yet ended). The words beside them are ``jobs show``'s: the workflow's ``progress``, the
    step's ``terms`` and what a waiting step waits for (``waiting_text``)."""

    id: UUID
    name: str | None
    status: str | None
    step: str
    requires: str
    after: list[DependencyView]
    release: Decision | None
    waiting_for: list[DependencyView] | None
    progress: str
    terms: str | None
    waiting_text: str | None

    @classmethod
    def of(cls, flow: JobWorkflow) -> JobWorkflowView:
        """``flow``'s document (the CLI's), with its words."""
        return cls.model_validate(
            {
                **flow.document(),
                "progress": NO_ROW if flow.row is None else steps_text(flow.row),
                "terms": release_terms(flow.requires) if flow.dependencies else None,
                "waiting_text": waiting_for_text(flow.dependencies, flow.requires)
                if flow.waiting
                else None,
            }
        )


class JobDetailView(BaseModel):
    """Everything the job's page shows, and which actions apply to it now."""

    job: JobView
    archived: ArchivedView | None
    batch: JobBatchView | None
    attempts: list[AttemptView]
    events: list[EventView]
    explanation: ExplanationView | None
    workflow: JobWorkflowView | None = None
    can_retry: bool
    can_cancel: bool

    @classmethod
    def of(cls, detail: JobDetail, explanation: Explanation | None) -> JobDetailView:
        job = detail.job
        live = detail.archived is None
        return cls(
            job=JobView.of(job),
            archived=None if detail.archived is None else ArchivedView.of(detail.archived),
            batch=None if detail.batch is None else JobBatchView.of(detail.batch),
            attempts=[AttemptView.of(a) for a in detail.attempts],
            events=[EventView.of(e) for e in detail.events],
            explanation=None if explanation is None else ExplanationView.of(explanation),
            workflow=None if detail.workflow is None else JobWorkflowView.of(detail.workflow),
            can_retry=live and job.status in RETRYABLE_STATUSES,
            can_cancel=live and job.status in ACTIVE_STATUSES,
        )
