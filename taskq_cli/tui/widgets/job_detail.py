"""The job detail screen: what the job is, what it carried, how it ended, and its history.

Sections: the fields an operator needs first (the progress its actor last reported, with a
bar when it gave a total; a batch's child names its batch and how far it has got, a
finalizer the batch it finalizes; a workflow's step names its workflow, and a waiting step
the dependencies it waits for), the payload, the result (or the last error
with its traceback), every attempt, and the event timeline. ``c`` and ``r`` act on this job
through the same confirmation as on the main screen, ``e`` explains it, ``y`` copies its
id; Esc goes back. A job the prune moved to
the archive opens with an "archived" banner (when, and when the archive deletes it), its
archived attempts, and no events: they were deleted when it was archived, by design.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from taskq_cli.batch_progress import JobBatch
from taskq_cli.dashboard.snapshot import JobDetail
from taskq_cli.job_progress import progress_line, reported_at
from taskq_cli.json_preview import preview_json
from taskq_cli.output import age, attempt_summary, status_line, to_jsonable
from taskq_cli.tui.literal import LiteralStatic
from taskq_cli.tui.messages import JobActionRequested
from taskq_cli.workflow_progress import JobWorkflow
from taskq_core.backend.protocol import ArchivedJob, AttemptRow, EventRow, JobRow
from taskq_core.explain import job_origin


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _ago(value: datetime | None) -> str | None:
    return None if value is None else age(value)


def _preview(value: Any, job_id: Any) -> Text:
    """A payload or result, its first characters when it is long (``json_preview``)."""
    shown = preview_json(value, indent=2)
    text = Text(shown.text)
    if shown.truncated:
        text.append("\n…\n")
        text.append(shown.note(f"taskq jobs show {job_id} --full prints it all"), style="dim")
    return text


def _fields(job: JobRow, batch: JobBatch | None = None, flow: JobWorkflow | None = None) -> Text:
    pairs: list[tuple[str, str]] = [
        ("id", str(job.id)),
        ("actor", job.actor),
        ("queue", job.queue),
        ("status", status_line(job)),
        ("progress", progress_line(job, _ago(reported_at(job))) or "-"),
        ("attempt", attempt_summary(job)),
        ("priority", str(job.priority)),
        ("created", _when(job.created_at)),
        ("scheduled", _when(job.scheduled_at)),
        ("claimed", _when(job.claimed_at)),
        ("started", _when(job.started_at)),
        ("finished", _when(job.finished_at)),
        ("worker", "-" if job.locked_by_worker is None else str(job.locked_by_worker)),
    ]
    optional = [
        ("origin", job_origin(job)),
        ("batch", None if batch is None else batch.field()),
        ("workflow", None if flow is None else flow.field()),
        ("waits for", None if flow is None else flow.waits_for()),
        ("identity key", job.identity_key),
        ("fairness key", job.fairness_key),
        ("deadline", _when(job.schedule_to_close) if job.schedule_to_close else None),
        ("cancel reason", job.cancel_reason),
        ("cancel asked", _when(job.cancel_requested_at) if job.cancel_requested_at else None),
        ("trace id", job.trace_id),
    ]
    pairs += [(name, value) for name, value in optional if value is not None]
    width = max(len(name) for name, _ in pairs)
    text = Text()
    for index, (name, value) in enumerate(pairs):
        if index:
            text.append("\n")
        text.append(name.ljust(width), style="bold")
        text.append("  ")
        text.append(value)
    return text


def _outcome(job: JobRow) -> tuple[str, Text]:
    if job.error_class is not None:
        text = Text(f"{job.error_class}: {job.error_message or ''}", style="bold")
        if job.error_traceback:
            text.append("\n\n")
            text.append(job.error_traceback)
        return "Error", text
    if job.result is not None:
        return "Result", _preview(job.result, job.id)
    return "Result", Text("none", style="dim")


def _attempts(attempts: list[AttemptRow]) -> Text:
    if not attempts:
        return Text("no attempt has finished yet", style="dim")
    return Text("\n").join(_attempt_line(attempt) for attempt in attempts)


def _attempt_line(attempt: AttemptRow) -> Text:
    duration = "-" if attempt.duration_ms is None else f"{attempt.duration_ms:.0f}ms"
    text = Text().append(f"#{attempt.attempt} ", style="bold")
    text.append(f"{attempt.outcome:<12} {_when(attempt.finished_at)}  {duration:>9}")
    if attempt.worker_id is not None:
        text.append(f"  worker {attempt.worker_id}")
    if attempt.error_class is not None:
        text.append(f"\n    {attempt.error_class}: {attempt.error_message or ''}")
    return text


def _archived_banner(archived: ArchivedJob) -> Text:
    return Text(
        f"ARCHIVED at {_when(archived.archived_at)}: the prune moved this job out of the jobs "
        f"table, so nothing will run it; the archive deletes it at {_when(archived.expire_at)}"
    )


def _timeline(events: list[EventRow], archived: bool) -> Text:
    if archived:
        return Text("deleted when the job was archived (by design)", style="dim")
    if not events:
        return Text("no events yet (enqueueing writes none)", style="dim")
    return Text("\n").join(_event_line(event) for event in events)


def _event_line(event: EventRow) -> Text:
    before = event.from_status.value if event.from_status else "-"
    after = event.to_status.value if event.to_status else "-"
    text = Text(_when(event.occurred_at))
    text.append(f"  {event.kind:<15}", style="bold")
    text.append(f"{before} → {after}")
    if event.detail:
        text.append(f"  {json.dumps(to_jsonable(event.detail), sort_keys=True)}", style="dim")
    return text


class JobDetailScreen(Screen[None]):
    """Everything about one job; ``show`` re-renders it after an action."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("c", "cancel_job", "Cancel job"),
        Binding("r", "retry_job", "Retry job"),
        Binding("e", "app.explain_job", "Explain"),
        Binding("y", "app.copy_id", "Copy id"),
    ]

    def __init__(self, detail: JobDetail) -> None:
        super().__init__()
        self.detail = detail

    @property
    def job_id(self) -> UUID:
        """The id of the job on screen."""
        return self.detail.job.id

    def compose(self) -> ComposeResult:
        """One scrolling column of sections."""
        yield LiteralStatic(id="detail-archived")
        with VerticalScroll(id="detail-body"):
            for section in ("fields", "payload", "outcome", "attempts", "events"):
                yield LiteralStatic(id=f"detail-{section}", classes="detail-section")
        yield Footer()

    def on_mount(self) -> None:
        """Render the job."""
        self.show(self.detail)

    def show(self, detail: JobDetail) -> None:
        """Render (or re-render) a job's detail."""
        self.detail = detail
        job = detail.job
        archived = detail.archived
        self.sub_title = f"job {job.id}" + (" (archived)" if archived else "")
        banner = self.query_one("#detail-archived", LiteralStatic)
        banner.set_class(archived is not None, "-visible")
        banner.update(_archived_banner(archived) if archived else "")
        events = "Events (deleted)" if archived else f"Events ({len(detail.events)})"
        sections: list[tuple[str, str, Text]] = [
            ("detail-fields", f"Job {job.id}", _fields(job, detail.batch, detail.workflow)),
            ("detail-payload", "Payload", _preview(job.payload, job.id)),
            ("detail-outcome", *_outcome(job)),
            ("detail-attempts", f"Attempts ({len(detail.attempts)})", _attempts(detail.attempts)),
            ("detail-events", events, _timeline(detail.events, archived is not None)),
        ]
        for widget_id, title, body in sections:
            widget = self.query_one(f"#{widget_id}", LiteralStatic)
            widget.border_title = title
            widget.update(body)

    def action_cancel_job(self) -> None:
        """Ask the app to cancel this job (it confirms first)."""
        if not self._refuse_archived("cancelled"):
            self.post_message(JobActionRequested(self.detail.job.id, "cancel"))

    def action_retry_job(self) -> None:
        """Ask the app to retry this job (it confirms first)."""
        if not self._refuse_archived("retried"):
            self.post_message(JobActionRequested(self.detail.job.id, "retry"))

    def _refuse_archived(self, done: str) -> bool:
        """An archived job is out of the jobs table: no action reaches it."""
        if self.detail.archived is None:
            return False
        self.notify(f"job {self.detail.job.id} is archived: it cannot be {done}", markup=False)
        return True
