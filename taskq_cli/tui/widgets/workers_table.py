"""The workers pane: who is alive, who went silent, who leads, and how busy each one is.

"last seen" is coloured by heartbeat age: fresh, late (past half the stale threshold), stale
(past it: the worker has isolated itself or died) and stopped.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from taskq_cli.output import worker_load
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.source import Snapshot, WorkerView

COLUMNS = ("leader", "label", "host", "pid", "workgroup", "state", "last seen", "jobs", "queues")
LEADER_MARK = "★"
_STATE_MEANING = {"running": "good", "stale": "bad", "stopped": "muted"}


class WorkersTable(DataTable[Text]):
    """One row per worker, keyed by worker id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.views: dict[str, WorkerView] = {}

    def on_mount(self) -> None:
        """Add the columns."""
        for label in COLUMNS:
            self.add_column(label)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's workers, keeping the cursor on its worker."""
        selected = None
        if self.row_count:
            selected = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        self.views = {str(view.row.id): view for view in snapshot.workers}
        self.clear()
        half_stale = snapshot.stale_after / 2
        for view in snapshot.workers:
            row = view.row
            seen = snapshot.now - row.last_seen_at
            if view.state == "running":
                freshness = "warn" if seen > half_stale else "good"
            else:
                freshness = _STATE_MEANING[view.state]
            self.add_row(
                palette.text(LEADER_MARK, "accent") if row.is_leader else Text(""),
                Text(row.label or "-", style="" if row.label else "dim"),
                Text(row.hostname),
                Text(str(row.pid), justify="right"),
                Text(row.workgroup_instance or "-", style="" if row.workgroup_instance else "dim"),
                palette.text(view.state, _STATE_MEANING[view.state]),
                palette.text(f"{age(row.last_seen_at, snapshot.now)} ago", freshness),
                Text(
                    worker_load(row.running_jobs, row.claimed_jobs, row.concurrency),
                    justify="right",
                ),
                Text(",".join(row.queues)),
                key=str(row.id),
            )
        if selected is not None and selected in self.views:
            self.move_cursor(row=self.get_row_index(selected), scroll=False)
