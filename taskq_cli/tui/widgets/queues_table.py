"""The queues pane: per queue, what waits, what runs (running bodies, then ``+N claimed``),
what failed lately and how fast work finishes, with the settings that explain a standstill
(max_concurrent, mode) and why it waits: "paused" for a paused queue, and for a queue whose
pending, claimed or due scheduled work is old what holds it (dashboard/queue_blockers.py).
On a narrow screen the least needed columns go (mode and the sparkline first); counts are
never cut short."""

from __future__ import annotations

from datetime import timedelta

from rich.text import Text
from textual.binding import Binding

from taskq_cli.dashboard.queue_blockers import PER_JOB, queue_blocker
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.output import running_count
from taskq_cli.tui.formatting import Palette, age, count, sparkline
from taskq_cli.tui.table import Column, FittedTable, Row
from taskq_core.backend.protocol import QueueActivity
from taskq_core.durations import format_duration
from taskq_core.statemachine import JobStatus


def columns(window: timedelta, minutes: int) -> tuple[Column, ...]:
    """The columns, naming the window of the failure count and of the sparkline; the rank
    says which go first when the screen is narrow."""
    return (
        Column("queue"),
        Column("pending"),
        Column("scheduled", 4),
        Column("running"),
        Column(f"failed {format_duration(window)}", 3),
        Column(f"finished/min ({minutes}m)", 7),
        Column("oldest pending"),
        Column("why", 1, shrink_to=10),
        Column("mode", 8),
        Column("max", 5),
    )


class QueuesTable(FittedTable):
    """One row per queue, keyed by name; the cursor stays on its queue across refreshes.
    Enter narrows the jobs pane to the queue under the cursor."""

    BINDINGS = [Binding("enter", "select_cursor", "Show its jobs")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(columns(timedelta(hours=1), 20), id=id)
        self.queues: dict[str, QueueActivity] = {}

    @property
    def selected(self) -> QueueActivity | None:
        """The queue under the cursor, if any."""
        key = self.selected_key
        return None if key is None else self.queues.get(key)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's queues, keeping the cursor on its queue."""
        minutes = len(snapshot.queues[0].finished_per_minute) if snapshot.queues else 20
        self.queues = {q.name: q for q in snapshot.queues}
        self.set_columns(columns(snapshot.window, minutes))
        self.fill([self._row(queue, snapshot, palette) for queue in snapshot.queues])

    @staticmethod
    def _row(queue: QueueActivity, snapshot: Snapshot, palette: Palette) -> Row:
        failed = queue.finished.get(JobStatus.FAILED, 0)
        oldest = queue.oldest_pending_at
        why = queue_blocker(queue, snapshot)
        cells = [
            Text(queue.name),
            Text(count(queue.pending), justify="right"),
            Text(count(queue.scheduled), justify="right"),
            Text(running_count(queue.running, queue.claimed, count), justify="right"),
            palette.text(count(failed), "bad" if failed else "", right=True),
            palette.text(sparkline(queue.finished_per_minute), "accent"),
            palette.waited(
                None if oldest is None else snapshot.now - oldest, age(oldest, snapshot.now)
            ),
            palette.text(why, "muted" if why == PER_JOB else "warn"),
            Text(queue.mode),
            Text("-" if queue.max_concurrent is None else str(queue.max_concurrent)),
        ]
        return Row(queue.name, cells)
