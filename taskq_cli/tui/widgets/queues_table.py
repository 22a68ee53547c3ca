"""The queues pane: per queue, what waits, what runs, what failed lately and how fast work
finishes, with the settings that explain a standstill (paused, max_concurrent, mode)."""

from __future__ import annotations

from datetime import timedelta

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from taskq_cli.tui.formatting import Palette, age, count, sparkline
from taskq_cli.tui.source import Snapshot
from taskq_core.backend.protocol import QueueActivity
from taskq_core.durations import format_duration
from taskq_core.statemachine import JobStatus


def column_labels(window: timedelta, minutes: int) -> tuple[str, ...]:
    """The column headers, naming the window of the failure count and of the sparkline."""
    return (
        "queue",
        "pending",
        "scheduled",
        "running",
        f"failed {format_duration(window)}",
        f"finished/min ({minutes}m)",
        "oldest pending",
        "mode",
        "max",
        "paused",
    )


class QueuesTable(DataTable[Text]):
    """One row per queue, keyed by name; the cursor stays on its queue across refreshes.
    Enter narrows the jobs pane to the queue under the cursor."""

    BINDINGS = [Binding("enter", "select_cursor", "Show its jobs")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.queues: dict[str, QueueActivity] = {}
        self._labels: tuple[str, ...] = ()

    def on_mount(self) -> None:
        """Add the columns with the default windows until a snapshot names its own."""
        self._set_columns(column_labels(timedelta(hours=1), 20))

    def _set_columns(self, labels: tuple[str, ...]) -> None:
        if labels == self._labels:
            return
        self.clear(columns=True)
        for label in labels:
            self.add_column(label)
        self._labels = labels

    @property
    def selected(self) -> QueueActivity | None:
        """The queue under the cursor, if any."""
        if not self.row_count:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return self.queues.get(str(row_key.value))

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's queues, keeping the cursor on its queue."""
        selected = self.selected
        minutes = len(snapshot.queues[0].finished_per_minute) if snapshot.queues else 20
        self._set_columns(column_labels(snapshot.window, minutes))
        self.queues = {q.name: q for q in snapshot.queues}
        self.clear()
        for queue in snapshot.queues:
            failed = queue.finished.get(JobStatus.FAILED, 0)
            oldest = queue.oldest_pending_at
            self.add_row(
                Text(queue.name),
                Text(count(queue.pending), justify="right"),
                Text(count(queue.scheduled), justify="right"),
                Text(
                    count(queue.running) + (f" +{queue.claimed}" if queue.claimed else ""),
                    justify="right",
                ),
                palette.text(count(failed), "bad" if failed else "", right=True),
                palette.text(sparkline(queue.finished_per_minute), "accent"),
                palette.waited(
                    None if oldest is None else snapshot.now - oldest, age(oldest, snapshot.now)
                ),
                Text(queue.mode),
                Text("-" if queue.max_concurrent is None else str(queue.max_concurrent)),
                palette.text("paused", "warn") if queue.paused else Text("no", style="dim"),
                key=queue.name,
            )
        if selected is not None and selected.name in self.queues:
            self.move_cursor(row=self.get_row_index(selected.name), scroll=False)
