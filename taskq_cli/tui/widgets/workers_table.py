"""The workers pane: who is alive, who went silent, who leads, and how busy each one is.

Live workers come first, then stale ones (silent past the threshold: isolated or dead, and
maybe holding jobs until the reclaim sweep); stopped workers are hidden unless asked for
(``w``), so the workers of the last deploys never push the live ones off a small screen.
The pane's title counts each kind. "last seen" is coloured by heartbeat age: fresh, late
(past half the stale threshold), stale, stopped.
"""

from __future__ import annotations

from rich.text import Text

from taskq_cli.dashboard.snapshot import Snapshot, WorkerView
from taskq_cli.output import worker_load
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.table import Column, FittedTable, Row

COLUMNS = (
    Column("leader"),
    Column("label"),
    Column("host", 3),
    Column("pid", 4),
    Column("workgroup", 6),
    Column("state"),
    Column("last seen"),
    Column("jobs"),
    Column("queues", 5),
    Column("worker id", 7),
)
LEADER_MARK = "★"
_STATE_MEANING = {"running": "good", "stale": "bad", "stopped": "muted"}


def workers_title(snapshot: Snapshot, show_stopped: bool) -> str:
    """The pane's title: how many workers are live, stale and stopped (and if hidden)."""
    states = [view.state for view in snapshot.workers]
    title = f"Workers · {states.count('running')} live · {states.count('stale')} stale"
    stopped = states.count("stopped")
    if stopped:
        title += f" · {stopped} stopped" + ("" if show_stopped else " (hidden, w shows)")
    return title


class WorkersTable(FittedTable):
    """One row per worker, keyed by worker id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(COLUMNS, id=id)
        self.views: dict[str, WorkerView] = {}
        self.show_stopped = False

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's workers, keeping the cursor on its worker."""
        views = [v for v in snapshot.workers if self.show_stopped or v.state != "stopped"]
        self.views = {str(view.row.id): view for view in views}
        self.fill([self._row(view, snapshot, palette) for view in views])

    @staticmethod
    def _row(view: WorkerView, snapshot: Snapshot, palette: Palette) -> Row:
        row = view.row
        seen = snapshot.now - row.last_seen_at
        if view.state == "running":
            freshness = "warn" if seen > snapshot.stale_after / 2 else "good"
        else:
            freshness = _STATE_MEANING[view.state]
        cells = [
            palette.text(LEADER_MARK, "accent") if row.is_leader else Text(""),
            Text(row.label or "-", style="" if row.label else "dim"),
            Text(row.hostname),
            Text(str(row.pid), justify="right"),
            Text(row.workgroup_instance or "-", style="" if row.workgroup_instance else "dim"),
            palette.text(view.state, _STATE_MEANING[view.state]),
            palette.text(f"{age(row.last_seen_at, snapshot.now)} ago", freshness),
            Text(worker_load(row.running_jobs, row.claimed_jobs, row.concurrency), justify="right"),
            Text(",".join(row.queues)),
            Text(str(row.id)),
        ]
        return Row(str(row.id), cells)
