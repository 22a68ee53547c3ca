"""A pane that shows only while its table has rows (limits, batches, workflows).

Each refresh fills the table from the snapshot; the pane shows while the table has a row,
with the border title ``title(snapshot)`` gives. ``top.tcss`` hides the pane until it
carries the ``-visible`` class.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import Vertical

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.tui.formatting import Palette
from taskq_cli.tui.table import FittedTable


class SnapshotTable(FittedTable):
    """A table that renders its rows from one snapshot (``LimitsTable``, ``BatchesTable``)."""

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Replace the rows with this snapshot's."""
        raise NotImplementedError


class OptionalPane(Vertical):
    """A bordered pane around ``table`` (id ``<label>-pane``), shown while it has rows."""

    def __init__(self, table: SnapshotTable, label: str, title: Callable[[Snapshot], str]) -> None:
        super().__init__(id=f"{label.lower()}-pane", classes="pane")
        self.border_title = label
        self.table = table
        self._title = title

    def compose(self) -> ComposeResult:
        yield self.table

    def show(self, snapshot: Snapshot, palette: Palette) -> None:
        """Fill the table from this snapshot; show the pane while the table has rows."""
        self.table.show(snapshot, palette)
        visible = self.table.row_count > 0
        self.set_class(visible, "-visible")
        if visible:
            self.border_title = self._title(snapshot)
