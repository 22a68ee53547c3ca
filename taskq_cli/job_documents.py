"""A job as JSON: the one place a job's rows become documents, for scripts and the web UI.

``taskq jobs list|show --json`` (and ``enqueue``, ``schedules run``) print these dicts; the
web UI's ``/api/jobs`` and ``/api/jobs/{id}`` models (``ui/pages/job_views.py``) are
validated from the same dicts, each declaring which of the fields it exposes and adding its
own (``origin``, ``error``, ``batch_id``). Field names here are the CLI's ``--json``
contract. Values stay Python objects (UUIDs, datetimes, statuses): each printer serializes.
No rich, typer, Textual or web stack here.
"""

from __future__ import annotations

from typing import Any

from taskq_cli.dashboard.snapshot import JobDetail
from taskq_cli.job_progress import progress_document
from taskq_core.backend.protocol import ArchivedJob, AttemptRow, EventRow, JobRow, JobSummary


def row_fields(row: object, names: str) -> dict[str, Any]:
    """``{name: row.name}`` for each of the space-separated ``names``, in their order (the
    order a document prints in)."""
    return {name: getattr(row, name) for name in names.split()}


def job_summary(job: JobSummary) -> dict[str, Any]:
    """A job as listings show it: everything except payload, result and traceback."""
    return {
        **row_fields(
            job,
            "id actor queue status priority attempt attempts_used attempts_spent max_attempts "
            "attempt_budget retry_kind created_at scheduled_at",
        ),
        "claimed": job.is_claimed,
        **row_fields(
            job,
            "claimed_at started_at finished_at updated_at locked_by_worker lock_expires_at "
            "identity_key fairness_key schedule_to_close cancel_phase cancel_requested_at "
            "cancel_reason error_class error_message",
        ),
    }


def job_document(job: JobRow) -> dict[str, Any]:
    """Every field of a job (``jobs show``)."""
    ttl = job.result_ttl
    return {
        **job_summary(job),
        "payload": job.payload,
        "result": job.result,
        "result_ttl_seconds": None if ttl is None else ttl.total_seconds(),
        **row_fields(
            job,
            "result_expires_at error_traceback metadata trace_id span_id progress_seq "
            "progress_state unique_key unique_until",
        ),
    }


def attempt_document(attempt: AttemptRow) -> dict[str, Any]:
    """One attempt: outcome, worker, duration, error."""
    return row_fields(
        attempt,
        "attempt outcome worker_id started_at finished_at duration_ms error_class "
        "error_message error_traceback",
    )


def event_document(event: EventRow) -> dict[str, Any]:
    """One timeline event."""
    return row_fields(event, "id occurred_at kind from_status to_status worker_id detail")


def archived_document(archived: ArchivedJob) -> dict[str, Any]:
    """When the prune archived the job and when the archive deletes it; its events were
    deleted then, by design."""
    return {
        "archived_at": archived.archived_at,
        "expire_at": archived.expire_at,
        "events_deleted": True,
    }


def job_detail_document(detail: JobDetail) -> dict[str, Any]:
    """One job with its progress, archive note, batch, workflow, attempts and events
    (``jobs show --json``)."""
    return {
        "job": job_document(detail.job),
        "progress": progress_document(detail.job),
        "archived": None if detail.archived is None else archived_document(detail.archived),
        "batch": None if detail.batch is None else detail.batch.document(),
        "workflow": None if detail.workflow is None else detail.workflow.document(),
        "attempts": [attempt_document(a) for a in detail.attempts],
        "events": [event_document(e) for e in detail.events],
    }
