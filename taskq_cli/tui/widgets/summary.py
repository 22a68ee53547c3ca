"""The summary at the top: which database, who leads, totals by status, the finish rate.

It answers "is work flowing?" before anything else: a leader that is missing or stale means
no sweeps (scheduled jobs are not promoted, dead workers' jobs are not reclaimed), and a
finish rate of zero with work pending means nothing is being processed.
"""

from __future__ import annotations

from rich.text import Text

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.output import running_count
from taskq_cli.tui.formatting import Palette, age, count, short_id, sparkline
from taskq_cli.tui.literal import LiteralStatic
from taskq_core.durations import format_duration
from taskq_core.statemachine import JobStatus

_ACTIVE = (JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING)
_FINISHED = (
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.CRASHED,
    JobStatus.ABANDONED,
)
# Finished counts that mean trouble when they are not zero.
_BAD = frozenset({JobStatus.FAILED, JobStatus.CRASHED, JobStatus.ABANDONED})
_SEPARATOR = "  │  "
# The header's average finish rate covers this many of the last minutes.
_RATE_MINUTES = 5


class SummaryHeader(LiteralStatic):
    """Three lines: location and leader; totals by status; jobs finished per minute."""

    def __init__(self, database: str, schema: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.database = database
        self.schema = schema

    def on_mount(self) -> None:
        """Say where we are before the first refresh lands."""
        line = self._location()
        line.append(_SEPARATOR)
        line.append("loading…", style="dim")
        self.update(line)

    def _location(self, palette: Palette | None = None, staleness: str | None = None) -> Text:
        # Lines never wrap (a wrapped line would push the next out of the three): on a
        # narrow screen their ends are cut instead, so the most needed facts come first.
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("database ", style="dim")
        line.append(self.database)
        if palette is not None and staleness is not None:  # read from a replica
            lost = staleness.startswith("not streaming")
            line.append(" (replica, ", style="dim")
            line.append_text(palette.text(staleness, "bad" if lost else ""))
            line.append(")", style="dim")
        line.append(_SEPARATOR)
        line.append("schema ", style="dim")
        line.append(self.schema)
        return line

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Render one snapshot."""
        first = self._location(palette, snapshot.staleness)
        first.append(_SEPARATOR)
        first.append("leader ", style="dim")
        leader = snapshot.leader
        if leader is None:
            first.append_text(palette.text("none (no maintenance sweeps run)", "warn"))
        else:
            row = leader.row
            name = row.label or short_id(row.id)
            meaning = "bad" if leader.state != "running" else ""
            first.append_text(palette.text(f"{name} ({row.hostname}:{row.pid})", meaning))
            if leader.state != "running":
                first.append_text(palette.text(f" {leader.state}", "bad"))
        first.append(_SEPARATOR)
        first.append(snapshot.now.strftime("%H:%M:%S UTC"), style="dim")

        totals = snapshot.totals()
        second = Text(no_wrap=True, overflow="ellipsis")
        for index, status in enumerate(_ACTIVE):
            if index:
                second.append("  ")
            second.append_text(palette.status(status))
            claimed = snapshot.claimed() if status is JobStatus.RUNNING else 0
            second.append(f" {running_count(totals[status], claimed, count)}")
        second.append(_SEPARATOR)
        second.append(f"last {format_duration(snapshot.window)}: ", style="dim")
        for index, status in enumerate(_FINISHED):
            if index:
                second.append("  ")
            second.append_text(palette.status(status))
            value = totals[status]
            meaning = "bad" if value and status in _BAD else ""
            second.append_text(palette.text(f" {count(value)}", meaning))

        per_minute = snapshot.finished_per_minute
        third = Text(no_wrap=True, overflow="ellipsis")
        third.append("finished/min ", style="dim")
        third.append(f"{count(snapshot.finished_last_minute)}", style="bold")
        third.append(" now · ", style="dim")
        third.append(f"{snapshot.finished_rate(_RATE_MINUTES):.1f}", style="bold")
        third.append(f" avg {_RATE_MINUTES}m  ", style="dim")
        third.append_text(palette.text(sparkline(per_minute), "accent"))
        third.append(f"  last {len(per_minute)} min", style="dim")
        oldest = min(
            (q.oldest_pending_at for q in snapshot.queues if q.oldest_pending_at is not None),
            default=None,
        )
        third.append(_SEPARATOR)
        third.append("oldest pending ", style="dim")
        waited = None if oldest is None else snapshot.now - oldest
        third.append_text(palette.waited(waited, age(oldest, snapshot.now)))
        self.update(Text("\n", no_wrap=True, overflow="ellipsis").join([first, second, third]))
