"""The jobs pane: recent failures by default, filterable by queue, actor and status.

``/`` opens the filter line (``queue=media actor=resize status=failed,crashed``, or
``status=all``; empty goes back to recent failures). Enter on a row asks the app for the
job's detail screen. Rows are keyed by job id, so the cursor follows its job as new rows
arrive above it, and while the operator browses the rows keep their order (see
``taskq_cli.tui.table``).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.output import attempt_cell
from taskq_cli.terminal_rich import safe_text
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.messages import JobChosen, JobsFilterChanged
from taskq_cli.tui.table import Column, FittedTable, Row
from taskq_core.backend.protocol import JobSummary
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

COLUMNS = (
    Column("job"),
    Column("actor"),
    Column("queue", 1),
    Column("status"),
    Column("attempt", 3),
    Column("when"),
    Column("error", 2, shrink_to=12),
)
# Longest error text a row shows; the detail screen has the whole message and traceback.
_ERROR_WIDTH = 44
FILTER_HINT = "queue=NAME actor=NAME status=failed,crashed|all   (empty: recent failures)"


def activity_at(job: JobSummary) -> datetime:
    """The moment the pane orders by: finished, else started (running), else created."""
    if job.status in TERMINAL_STATUSES and job.finished_at is not None:
        return job.finished_at
    if job.status is JobStatus.RUNNING:
        since = job.started_at or job.claimed_at
        if since is not None:
            return since
    return job.created_at


class JobsTable(FittedTable):
    """The rows of the jobs pane, keyed by job id. The job column shows the whole id when
    every column fits with it, else its last 12 hex digits (a suffix ``taskq jobs show``
    takes); ``y`` copies the whole id either way and the detail screen shows it."""

    BINDINGS = [Binding("enter", "select_cursor", "Details")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(COLUMNS, hold_order=True, id=id)
        self.jobs: dict[str, JobSummary] = {}
        self.jobs_filter: JobsFilter | None = None
        self._last: tuple[Snapshot, Palette] | None = None

    @property
    def selected(self) -> JobSummary | None:
        """The job under the cursor, if any."""
        key = self.selected_key
        return None if key is None else self.jobs.get(key)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's jobs, keeping the cursor on its job."""
        self._last = (snapshot, palette)
        if snapshot.jobs_filter != self.jobs_filter:
            self.forget_order()  # another filter: its own order, from the top
            self.jobs_filter = snapshot.jobs_filter
        self.jobs = {str(job.id): job for job in snapshot.jobs}
        self.fill_with_ids(  # the suffix when whole ids cost a column
            snapshot.jobs,
            lambda job: job.id,
            lambda job, label: self._row(job, snapshot, palette, label),
        )

    @staticmethod
    def _row(job: JobSummary, snapshot: Snapshot, palette: Palette, label: str) -> Row:
        error = ""
        if job.error_class:
            error = f"{job.error_class}: {job.error_message or ''}".strip()
            if len(error) > _ERROR_WIDTH:
                error = error[: _ERROR_WIDTH - 1] + "…"
        cells = [
            Text(label),
            Text(job.actor),
            Text(job.queue),
            palette.status(job.status, claimed=job.is_claimed),
            Text(attempt_cell(job), justify="right"),
            Text(f"{age(activity_at(job), snapshot.now)} ago"),
            palette.text(error, "bad"),
        ]
        return Row(str(job.id), cells)

    def on_resize(self, event: events.Resize) -> None:
        """A new width may fit the whole ids, or no longer fit them: render again."""
        if self._last is not None:
            self.show(*self._last)


class JobsPane(Vertical):
    """The filter line (hidden until ``/``) above the jobs table."""

    BINDINGS = [Binding("escape", "close_filter", "Close filter", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.jobs_filter = JobsFilter()

    def compose(self) -> ComposeResult:
        """The filter input and the table."""
        yield Input(placeholder=FILTER_HINT, id="jobs-filter")
        yield JobsTable(id="jobs-table")

    def on_mount(self) -> None:
        """Title the pane after the opening filter."""
        self._title(self.jobs_filter.describe())

    def _title(self, text: str) -> None:
        # The filter names a queue or an actor: literal text (a str title would be markup).
        self.border_title = safe_text(text)

    @property
    def table(self) -> JobsTable:
        """The jobs table."""
        return self.query_one(JobsTable)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Render a snapshot's jobs (its filter names the pane)."""
        self._title(f"{snapshot.jobs_filter.describe()} · {len(snapshot.jobs)}")
        self.table.show(snapshot, palette)

    def apply_filter(self, jobs_filter: JobsFilter) -> None:
        """Switch to ``jobs_filter`` as if the operator had typed it."""
        self.jobs_filter = jobs_filter
        self._title(jobs_filter.describe())
        self.post_message(JobsFilterChanged(jobs_filter))

    def open_filter(self) -> None:
        """Show the filter line, filled with the current filter, and focus it."""
        field = self.query_one("#jobs-filter", Input)
        field.value = self.jobs_filter.to_text()
        field.add_class("-open")
        field.focus()

    def action_close_filter(self) -> None:
        """Hide the filter line without changing the filter."""
        self.query_one("#jobs-filter", Input).remove_class("-open")
        self.table.focus()

    @on(Input.Submitted, "#jobs-filter")
    def _submit_filter(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            jobs_filter = JobsFilter.parse(event.value)
        except ValueError as exc:
            self.notify(str(exc), title="filter", severity="error", markup=False)
            return
        self.action_close_filter()
        self.apply_filter(jobs_filter)

    @on(DataTable.RowSelected, "#jobs-table")
    def _choose_job(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(JobChosen(UUID(event.row_key.value)))
