"""The workflows pane: running workflows, then those that ended lately, with their steps.

One row per workflow: its id (the last 12 hex digits when the whole id does not fit, a
suffix ``taskq workflows show`` takes), name, status, a bar of the steps ended, the steps
ended of total, and the steps by status: waiting for their dependencies, due (pending or
scheduled), running, failed (failed, crashed or abandoned), cancelled; and its age. The pane
shows only while some workflow runs or one ended within the dashboard's window.
"""

from __future__ import annotations

from rich.text import Text

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.table import Column, Row
from taskq_cli.tui.widgets.optional_pane import SnapshotTable
from taskq_cli.workflow_progress import DUE_STATUSES, FAILED_STATUSES, count_of, ended
from taskq_core.backend.protocol.workflows import WorkflowRow, WorkflowStatus
from taskq_core.statemachine import JobStatus

COLUMNS = (
    Column("workflow"),
    Column("name", 3, shrink_to=10),
    Column("status"),
    Column("", 6),  # the bar
    Column("ended"),
    Column("waiting", 4),
    Column("due", 5),
    Column("running", 2),
    Column("failed", 1),
    Column("cancelled", 7),
    Column("age", 8),
)
_BAR = 10  # cells of the steps-ended bar
_MEANING = {
    WorkflowStatus.RUNNING: "accent",
    WorkflowStatus.SUCCEEDED: "good",
    WorkflowStatus.FAILED: "bad",
    WorkflowStatus.CANCELLED: "warn",
}


def _bar(row: WorkflowRow) -> str:
    filled = round(ended(row) / row.total * _BAR) if row.total else 0
    return "█" * filled + "░" * (_BAR - filled)


def _count(palette: Palette, value: int, meaning: str) -> Text:
    return palette.text(str(value), meaning if value else "muted", right=True)


# Alike BatchesTable (batches_table.py) by shape only: each SnapshotTable names its
# columns and its snapshot's rows and their id (fill_with_ids does the rest); the cells differ.
class WorkflowsTable(SnapshotTable):
    """One row per workflow, keyed by its id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(COLUMNS, id=id)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's workflows (whole ids when they cost no
        column)."""
        self.fill_with_ids(
            snapshot.workflows,
            lambda row: row.id,
            lambda row, label: self._row(row, snapshot, palette, label),
        )

    @staticmethod
    def _row(row: WorkflowRow, snapshot: Snapshot, palette: Palette, label: str) -> Row:
        failed = count_of(row.counts, FAILED_STATUSES)
        cells = [
            Text(label),
            Text(row.name or "-"),
            palette.text(row.status.value, _MEANING[row.status]),
            palette.text(_bar(row), "bad" if failed else "good"),
            Text(f"{ended(row)}/{row.total}", justify="right"),
            _count(palette, row.counts.get(JobStatus.WAITING, 0), ""),
            _count(palette, count_of(row.counts, DUE_STATUSES), ""),
            _count(palette, row.counts.get(JobStatus.RUNNING, 0), "accent"),
            _count(palette, failed, "bad"),
            _count(palette, row.counts.get(JobStatus.CANCELLED, 0), "warn"),
            Text(f"{age(row.created_at, snapshot.now)} ago"),
        ]
        return Row(str(row.id), cells)


def workflows_title(snapshot: Snapshot) -> str:
    """The pane's title: how many run, how many ended lately (the newest shown when more
    run than the pane lists)."""
    running = sum(1 for row in snapshot.workflows if row.status is WorkflowStatus.RUNNING)
    if snapshot.more_workflows:
        return f"Workflows · newest {running} of more running · taskq workflows list"
    recent = len(snapshot.workflows) - running
    return f"Workflows · {running} running" + (f" · {recent} ended lately" if recent else "")
