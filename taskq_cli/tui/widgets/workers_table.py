"""The workers pane: who is alive, who went silent, who leads, and how busy each one is.

Live workers come first, then stale ones (silent past the threshold: isolated or dead, and
maybe holding jobs until the reclaim sweep); stopped workers are hidden unless asked for
(``w``), so the workers of the last deploys never push the live ones off a small screen.
The pane's title counts each kind. "last seen" is coloured by heartbeat age: fresh, late
(past half the stale threshold), stale, stopped. ``a`` acknowledges the selected stale
worker's silence (after confirmation; recorded with the operator): its alert goes, and its
state reads ``stale, acked`` until it is heard from again or the cleanup deletes its row.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from functools import partial

from rich.text import Text
from textual.binding import Binding

from taskq_cli.dashboard.failures import describe_failure
from taskq_cli.dashboard.snapshot import Snapshot, WorkerView
from taskq_cli.dashboard.source import DashboardSource
from taskq_cli.output import worker_load
from taskq_cli.tui.formatting import Palette, age
from taskq_cli.tui.table import Column, FittedTable, Row
from taskq_cli.tui.widgets.confirm import ConfirmScreen

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


def worker_name(view: WorkerView) -> str:
    """``label (host:pid)``, or ``host:pid`` for a worker without a label."""
    row = view.row
    return f"{row.label} ({row.hostname}:{row.pid})" if row.label else f"{row.hostname}:{row.pid}"


def workers_title(snapshot: Snapshot, show_stopped: bool) -> str:
    """The pane's title: how many workers are live, stale and stopped (and if hidden)."""
    states = [view.state for view in snapshot.workers]
    title = f"Workers · {states.count('running')} live · {states.count('stale')} stale"
    stopped = states.count("stopped")
    if stopped:
        title += f" · {stopped} stopped" + ("" if show_stopped else " (hidden, w shows)")
    return title


class WorkersTable(FittedTable):
    """One row per worker, keyed by worker id; ``a`` acknowledges a stale one's silence
    through ``source`` (each call bounded by ``timeout`` seconds)."""

    BINDINGS = [Binding("a", "acknowledge", "Ack stale")]

    def __init__(
        self, source: DashboardSource, timeout: float = 5.0, *, id: str | None = None
    ) -> None:
        super().__init__(COLUMNS, id=id)
        self.source = source
        self.timeout = timeout
        self.views: dict[str, WorkerView] = {}
        self.show_stopped = False
        self.now: datetime | None = None  # the shown snapshot's (database clock)

    @property
    def selected(self) -> WorkerView | None:
        """The worker under the cursor, if any."""
        key = self.selected_key
        return None if key is None else self.views.get(key)

    def action_acknowledge(self) -> None:
        """Acknowledge the selected stale worker's silence, after confirmation."""
        view = self.selected
        if view is None or self.now is None:
            self.notify("no worker selected", severity="warning")
            return
        name = worker_name(view)
        if view.state != "stale" or view.acknowledged:
            said = "already acknowledged" if view.acknowledged else f"{view.state}: no alert"
            self.notify(f"worker {name} is {said}", severity="warning", markup=False)
            return
        question = f"Acknowledge the silence of stale worker {name}?"
        detail = (
            "Its alert goes (recorded with your user@host) until it is heard from again; "
            "the stale-worker cleanup deletes its row later."
        )
        confirmed = partial(self._confirmed, view, self.now)
        self.app.push_screen(ConfirmScreen(question, detail), callback=confirmed)

    def _confirmed(self, view: WorkerView, now: datetime, confirmed: bool | None) -> None:
        if confirmed:
            self.run_worker(self._acknowledge(view, now), group="action")

    async def _acknowledge(self, view: WorkerView, now: datetime) -> None:
        name = worker_name(view)
        try:
            done = await asyncio.wait_for(
                self.source.acknowledge_worker(view.row.id, now), self.timeout
            )
        except Exception as exc:
            _, reason = describe_failure(exc, self.timeout)
            self.notify(f"cannot acknowledge {name}: {reason}", severity="error", markup=False)
            return
        said = {"acknowledged": "silence acknowledged", "not_found": "gone (cleaned up)"}
        self.notify(f"worker {name}: {said.get(done.outcome, done.outcome)}", markup=False)
        await self.app.run_action("refresh_now")

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's workers, keeping the cursor on its worker."""
        self.now = snapshot.now
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
            palette.text("stale, acked", "warn")
            if view.acknowledged
            else palette.text(view.state, _STATE_MEANING[view.state]),
            palette.text(f"{age(row.last_seen_at, snapshot.now)} ago", freshness),
            Text(worker_load(row.running_jobs, row.claimed_jobs, row.concurrency), justify="right"),
            Text(",".join(row.queues)),
            Text(str(row.id)),
        ]
        return Row(str(row.id), cells)
