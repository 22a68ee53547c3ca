"""The limits pane: each rate limit and reservation the workers declared, and its use now
(tokens spent of the burst, uses within the window, slots held), one row per instance (a
keyed limit shows its busiest keys). The pane shows only when some limit is declared."""

from __future__ import annotations

from rich.text import Text

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.tui.formatting import Palette
from taskq_cli.tui.table import Column, Row
from taskq_cli.tui.widgets.optional_pane import SnapshotTable
from taskq_core.backend.protocol import LimitUsage

COLUMNS = (
    Column("limit"),
    Column("rule", 2, shrink_to=12),
    Column("in use"),
    Column("", 3),  # the bar
    Column("state in", 4),
)
_BAR = 10  # cells of the use bar


def _used(usage: LimitUsage) -> str:
    if usage.used is None:
        return "in Redis"
    noun = {"token_bucket": "tokens", "sliding_window": "uses", "reservation": "slots"}
    return f"{usage.used:.0f} of {usage.limit.capacity:g} {noun[usage.limit.kind]}"


def _meaning(share: float | None) -> str:
    if share is None:
        return "muted"
    if share >= 1.0:
        return "bad"
    return "warn" if share >= 0.8 else "good"


class LimitsTable(SnapshotTable):
    """One row per limit instance, keyed by its name."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(COLUMNS, id=id)

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's limits."""
        self.fill([self._row(usage, palette) for usage in snapshot.limits])

    @staticmethod
    def _row(usage: LimitUsage, palette: Palette) -> Row:
        share = usage.share
        filled = 0 if share is None else round(share * _BAR)
        meaning = _meaning(share)
        cells = [
            Text(usage.instance),
            palette.text(usage.limit.rule(), "muted"),
            palette.text(_used(usage), meaning, right=True),
            palette.text("█" * filled + "░" * (_BAR - filled), meaning),
            palette.text(usage.limit.store, "muted"),
        ]
        return Row(usage.instance, cells)


def limits_title(snapshot: Snapshot) -> str:
    """The pane's title: how many limits, and how many are used up now."""
    names = {usage.limit.name for usage in snapshot.limits}
    full = {u.limit.name for u in snapshot.limits if u.share is not None and u.share >= 1.0}
    title = f"Limits · {len(names)}"
    return title + (f" · {len(full)} used up" if full else "")
