"""The batches pane: the newest active batches with a row, and how far each has got.

One row per batch: its id (the last 12 hex digits when the whole id does not fit, a suffix
``taskq batches show`` takes), queue, a progress bar with children done of total, failed and
cancelled children, consecutive failures of the abort threshold, the finalizer, and its age.
The pane shows only while some batch is active; plain tagged batches have no row and never
appear here.
"""

from __future__ import annotations

from rich.text import Text

from taskq_cli.batch_progress import BatchProgress
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.table import Column, Row
from taskq_cli.tui.widgets.optional_pane import SnapshotTable

COLUMNS = (
    Column("batch"),
    Column("queue", 3),
    Column("", 5),  # the bar
    Column("done"),
    Column("failed", 2),
    Column("cancelled", 4),
    Column("failures", 6),
    Column("finalizer", 7),
    Column("age", 1),
)
_BAR = 10  # cells of the progress bar


def _bar(progress: BatchProgress) -> str:
    filled = round(progress.done / progress.total * _BAR) if progress.total else 0
    return "█" * filled + "░" * (_BAR - filled)


# Alike WorkflowsTable (workflows_table.py) by shape only: each SnapshotTable names its
# columns and its snapshot's rows and their id (fill_with_ids does the rest); the cells differ.
class BatchesTable(SnapshotTable):
    """One row per active batch, keyed by its id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(COLUMNS, id=id)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's batches (whole ids when they cost no
        column)."""
        self.fill_with_ids(
            snapshot.batches,
            lambda progress: progress.batch_id,
            lambda progress, label: self._row(progress, snapshot, palette, label),
        )

    @staticmethod
    def _row(progress: BatchProgress, snapshot: Snapshot, palette: Palette, label: str) -> Row:
        row = progress.row
        meaning = "bad" if progress.failed else "good"
        cells = [
            Text(label),
            Text("-" if row is None else row.queue),
            palette.text(_bar(progress), meaning),
            Text(f"{progress.done}/{progress.total}", justify="right"),
            palette.text(str(progress.failed), "bad" if progress.failed else "muted", right=True),
            palette.text(
                str(progress.cancelled), "warn" if progress.cancelled else "muted", right=True
            ),
            palette.text(progress.failures_text() or "-", "muted", right=True),
            Text("-" if row is None or row.finalizer_actor is None else row.finalizer_actor),
            Text("-" if row is None else f"{age(row.created_at, snapshot.now)} ago"),
        ]
        return Row(str(progress.batch_id), cells)


def batches_title(snapshot: Snapshot) -> str:
    """The pane's title: how many batches are active (the newest shown when more are)."""
    count = len(snapshot.batches)
    if snapshot.more_batches:
        return f"Batches · newest {count} of more active · taskq batches list --active"
    return f"Batches · {count} active"
