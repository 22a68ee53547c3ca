"""What the dashboard's three tables share: columns that fit the width, and rows that stay put.

Columns: each has a rank; when the cells (never truncated: a number or an id cut short is
worse than a missing column) do not fit the table's width, the highest ranks go first, so an
80-column terminal shows the essential columns whole instead of a horizontal scrollbar.

Rows: a refresh keeps the cursor on its row's key and that row on the same screen line.
A table that ``holds`` its order (the jobs pane) keeps the rows it already showed in the
order it showed them while the operator browses (cursor below the first row); rows new to
the table go on top. With the cursor on the first row it shows the source's order live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from taskq_cli.terminal_rich import safe_text
from taskq_cli.tui.formatting import short_id

T = TypeVar("T")

# Room kept for the vertical scrollbar, which appears once the rows overflow.
_SCROLLBAR = 2


@dataclass(frozen=True)
class Column:
    """A table column: its header, how early it is dropped on a narrow screen (0: never;
    otherwise higher ranks go first), and for free text (never a number or an id) the
    width it may be cut down to, with an ellipsis, before any column is dropped."""

    label: str
    rank: int = 0
    shrink_to: int = 0


@dataclass(frozen=True)
class Row:
    """One row's key and its cells, one per Column; the cells are made literal here (control
    characters shown escaped: ``safe_text``), so no pane can show one raw."""

    key: str
    cells: Sequence[Text]

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", tuple(safe_text(cell) for cell in self.cells))


Fit = list[tuple[int, int | None]]


def fit_columns(columns: Sequence[Column], rows: Sequence[Row], width: int, padding: int) -> Fit:
    """The columns to show, as (index, cut cells to this many characters or None): all of
    them when their widest cells fit ``width``; else the highest-ranked columns are dropped
    until they fit, except that a free-text column is cut (not below its ``shrink_to``)
    rather than dropping columns ranked below it."""
    widths = [
        max([len(column.label)] + [row.cells[index].cell_len for row in rows]) + 2 * padding
        for index, column in enumerate(columns)
    ]
    shown = list(range(len(columns)))
    droppable = sorted((i for i, c in enumerate(columns) if c.rank), key=lambda i: -columns[i].rank)
    while True:
        over = sum(widths[i] for i in shown) - width
        if over <= 0:
            return [(i, None) for i in shown]
        # Free text is cut only once every column ranked above it has gone.
        next_rank = columns[droppable[0]].rank if droppable else 0
        for i in shown:
            floor = max(columns[i].shrink_to, len(columns[i].label)) + 2 * padding
            if columns[i].shrink_to and columns[i].rank >= next_rank and widths[i] - over >= floor:
                return [(j, widths[j] - over - 2 * padding if j == i else None) for j in shown]
        if not droppable:
            return [(i, None) for i in shown]
        shown.remove(droppable.pop(0))


def _cut(cell: Text, limit: int | None) -> Text:
    if limit is None or cell.cell_len <= limit:
        return cell
    cut = cell.copy()
    cut.truncate(limit, overflow="ellipsis")
    return cut


class FittedTable(DataTable[Text]):
    """A row-cursor table that renders Rows through ``fill``, fitting its columns to its
    width and keeping the cursor's row in place across refreshes."""

    def __init__(
        self, columns: Sequence[Column], *, hold_order: bool = False, id: str | None = None
    ) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.all_columns: tuple[Column, ...] = tuple(columns)
        self.hold_order = hold_order
        self._rows: list[Row] = []
        self._shown_columns: list[int] | None = None
        self._fit: Fit = []
        self._order: list[str] = []
        self.full_ids = False  # whether fill_with_ids labelled the rows with whole ids

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor, if any."""
        if not self.row_count:
            return None
        value = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return None if value is None else str(value)

    @property
    def labels(self) -> list[str]:
        """The headers of the columns on screen."""
        return [str(column.label) for column in self.ordered_columns]

    def set_columns(self, columns: Sequence[Column]) -> None:
        """Replace the column set (a new window in a header, say); rows are kept."""
        if tuple(columns) != self.all_columns:
            self.all_columns = tuple(columns)
            self._shown_columns = None
            self.fill(self._rows)

    def forget_order(self) -> None:
        """The next ``fill`` shows the source's order (the rows now mean something else)."""
        self._order = []

    def fill_with_ids(
        self, items: Sequence[T], ident: Callable[[T], UUID], row: Callable[[T, str], Row]
    ) -> None:
        """Show one row per item, labelled with its whole id when that costs no column (the
        same columns fit as with short ids), else with its short id."""
        whole = [row(item, str(ident(item))) for item in items]
        short = [row(item, short_id(ident(item))) for item in items]
        width, columns = self.available_width(), self.all_columns

        def shown(rows: Sequence[Row]) -> list[int]:
            return [index for index, _ in fit_columns(columns, rows, width, self.cell_padding)]

        self.full_ids = shown(whole) == shown(short)
        self.fill(whole if self.full_ids else short)

    def fill(self, rows: Sequence[Row]) -> None:
        """Show these rows (in the source's order unless the table holds its own)."""
        key = self.selected_key
        line = self.cursor_row - round(self.scroll_y)
        old_row = self.cursor_row
        self._rows = list(rows)
        by_key = {row.key: row for row in rows}
        order = [row.key for row in rows]
        if self.hold_order and self._order and old_row > 0:
            kept = [k for k in self._order if k in by_key]
            known = set(kept)
            order = [k for k in order if k not in known] + kept
        self._order = order
        self._fit = fit_columns(self.all_columns, rows, self.available_width(), self.cell_padding)
        shown = [index for index, _ in self._fit]
        if shown != self._shown_columns:
            self.clear(columns=True)
            for index in shown:
                self.add_column(self.all_columns[index].label, key=self.all_columns[index].label)
            self._shown_columns = shown
        else:
            self.clear()
        for row_key in order:
            cells = by_key[row_key].cells
            self.add_row(*(_cut(cells[index], limit) for index, limit in self._fit), key=row_key)
        if not self.row_count:
            return
        target = min(old_row, self.row_count - 1)
        if key is not None and key in by_key:
            target = self.get_row_index(key)
        self.move_cursor(row=target, scroll=False)
        top = max(target - max(line, 0), 0)
        self.call_after_refresh(self.scroll_to, y=top, animate=False)

    def available_width(self) -> int:
        """The width the columns may take (everything before the first layout)."""
        width, height = self.size
        if not width:
            return 10_000  # not laid out yet: show everything
        overflows = len(self._rows) + int(self.show_header) > height
        return width - _SCROLLBAR if overflows else width

    def on_resize(self, event: events.Resize) -> None:
        """A new width may fit more or fewer columns."""
        if (
            fit_columns(self.all_columns, self._rows, self.available_width(), self.cell_padding)
            != self._fit
        ):
            self.fill(self._rows)
