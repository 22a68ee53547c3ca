"""The terminal sanitiser (``taskq_core.terminal_text``) applied to Rich.

``safe_text`` is what every table cell, listing line and TUI widget goes through before it is
laid out: control characters shown in their escaped form, styles kept. ``TerminalConsole``
is the CLI's console: whatever reaches it (a renderable a command built by hand, a progress
bar, a live table) leaves with no control character in its text, whatever its author did;
Rich's own escape sequences (colours, cursor moves) are control segments and pass as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Span, Text

from taskq_core.terminal_text import terminal_safe, without_terminal_controls


def safe_text(value: str | Text) -> Text:
    """``value`` as literal Text (never markup) with control characters shown escaped; a
    Text keeps its styles on the characters they covered."""
    if isinstance(value, str):
        return Text(terminal_safe(value))
    plain = value.plain
    if terminal_safe(plain) is plain:  # (the same string when there was nothing to show)
        return value
    # Each character escaped on its own (Rich keeps no carriage return in a Text, so this is
    # terminal_safe(plain)), and where each one starts now, to move the spans along.
    pieces = [terminal_safe(char) for char in plain]
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    escaped = "".join(pieces)

    def at(offset: int) -> int:
        return starts[min(max(offset, 0), len(plain))]

    return Text(
        escaped,
        style=value.style,
        justify=value.justify,
        overflow=value.overflow,
        no_wrap=value.no_wrap,
        end=value.end,
        tab_size=value.tab_size,
        spans=[Span(at(span.start), at(span.end), span.style) for span in value.spans],
    )


class TerminalConsole(Console):
    """A Console that drops every control character from the text it renders (see
    ``without_terminal_controls``): the last line of defence behind ``safe_text``."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Rich's rendering, with control characters dropped from every text segment."""
        for segment in super().render(renderable, options):
            if segment.control is None:
                text = without_terminal_controls(segment.text)
                if text is not segment.text:  # (the same string when there was none)
                    segment = Segment(text, segment.style)
            yield segment
