"""How the dashboard shows text from the database: literally, with control characters shown.

Every pane's cells go through ``safe_text`` when a Row is built (``tui/table.py``); every
other text widget is a LiteralStatic, and every toast goes through ``TopApp.notify``. Behind
them, TerminalControlFilter is the app's line filter: whatever a widget still renders with a
control character in it (an Input holding a queue name, a widget added without the above)
has the character dropped before the screen is written.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.color import Color
from textual.filter import LineFilter
from textual.visual import VisualType
from textual.widgets import Static

from taskq_cli.terminal_rich import safe_text
from taskq_core.terminal_text import without_terminal_controls


class LiteralStatic(Static):
    """A Static for text from the database: never markup, control characters shown escaped
    (``taskq_core.terminal_text``), styles of a Text kept."""

    def __init__(
        self, content: VisualType = "", *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(_literal(content), id=id, classes=classes, markup=False)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        """Show ``content`` (a str or a Text) literally."""
        super().update(_literal(content), layout=layout)


def _literal(content: VisualType) -> VisualType:
    # Another renderable is shown as it is (the line filter still drops raw controls).
    return safe_text(content) if isinstance(content, str | Text) else content


class TerminalControlFilter(LineFilter):
    """Drops the control characters left in a rendered line (they take no cell, so the
    layout holds); a lone surrogate becomes U+FFFD."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        """The line with no control character in its text."""
        return [_without_controls(segment) for segment in segments]


def _without_controls(segment: Segment) -> Segment:
    if segment.control:
        return segment
    text = without_terminal_controls(segment.text)
    # (The same string when there was none: the segment is kept as it is.)
    return segment if text is segment.text else Segment(text, segment.style)
