"""Jinja filters the pages share: counts, ages, times, durations, the sparkline, and
``path_segment`` for every value put in a URL path (paths.py).

A time in a table is relative (``ago``: ``3 s ago``, ``in 2 min``), one on a detail page
absolute (``when``); either is a ``<time>`` element whose tooltip holds the full ISO value,
so a column stays narrow and the exact instant is a hover away. The JSON API keeps ISO.

Every filter returns plain text that autoescaping escapes, except ``sparkline``, ``ago``
and ``when``, whose markup is built here from numbers and datetimes only (never from a value
read from the database as text).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup

from taskq_cli import output
from taskq_cli.ui.paths import path_segment
from taskq_core.durations import format_duration

_BAR_WIDTH = 6
_BAR_GAP = 1
_HEIGHT = 24


def count(value: int | None) -> str:
    """A count with thousands separators (a dash for none)."""
    return "-" if value is None else f"{value:,}"


def age(then: datetime | None, now: datetime | None = None) -> str:
    """How long ago (``45s``, ``3m10s``) or how long until (``in 3m``); a dash for never."""
    return output.age(then, now) or "-"


# The units a relative time is said in, the largest that fits first.
_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def relative(moment: datetime, now: datetime | None = None) -> str:
    """``3 s ago``, ``5 h ago``, ``in 2 min`` (the largest whole unit), ``now`` within a
    second; ``now`` None: this server's clock."""
    delta = (now or datetime.now(UTC)) - moment
    seconds = abs(delta.total_seconds())
    if seconds < 1:
        return "now"
    unit, size = next((unit, size) for unit, size in _UNITS if seconds >= size)
    amount = f"{int(seconds // size)} {unit}"
    return f"in {amount}" if delta < timedelta(0) else f"{amount} ago"


def _time(moment: datetime, text: str, title: str) -> Markup:
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        moment.isoformat(), title, text
    )


def ago(moment: datetime | None, now: datetime | None = None) -> Markup | str:
    """A time in a table: relative to ``now`` (None: this server's clock), its full ISO
    value in the tooltip; a dash for never."""
    if moment is None:
        return "-"
    return _time(moment, relative(moment, now), moment.isoformat())


def when(moment: datetime | None, now: datetime | None = None) -> Markup | str:
    """A time on a detail page: ISO-8601 to the second, with the full value and how long
    ago (or until) in the tooltip; a dash for never."""
    if moment is None:
        return "-"
    title = f"{moment.isoformat()} ({relative(moment, now)})"
    return _time(moment, output.timestamp(moment) or "-", title)


def duration(value: timedelta | float | None) -> str:
    """``30s``, ``5m``, ``1h`` (seconds accepted too)."""
    if value is None:
        return "-"
    if not isinstance(value, timedelta):
        value = timedelta(seconds=value)
    return format_duration(value)


def sparkline(values: Sequence[int], label: str = "finished per minute") -> Markup:
    """One bar per value, scaled to the largest, as inline SVG (each bar's count in its
    tooltip; the newest on the right)."""
    numbers = [max(int(v), 0) for v in values]
    peak = max(numbers, default=0)
    width = max(len(numbers) * (_BAR_WIDTH + _BAR_GAP) - _BAR_GAP, 1)
    bars = []
    for index, value in enumerate(numbers):
        height = 1 if peak == 0 else max(1, round(value / peak * _HEIGHT))
        x = index * (_BAR_WIDTH + _BAR_GAP)
        ago = len(numbers) - 1 - index
        title = f"{value:,} {'in the last minute' if ago == 0 else f'{ago} min before'}"
        bars.append(
            f'<rect x="{x}" y="{_HEIGHT - height}" width="{_BAR_WIDTH}" height="{height}">'
            f"<title>{title}</title></rect>"
        )
    return Markup(
        f'<svg class="spark" role="img" aria-label="{Markup.escape(label)}" width="{width}" '
        f'height="{_HEIGHT}" viewBox="0 0 {width} {_HEIGHT}">{"".join(bars)}</svg>'
    )


FILTERS: dict[str, Any] = {
    "count": count,
    "age": age,
    "ago": ago,
    "when": when,
    "duration": duration,
    "sparkline": sparkline,
    "path_segment": path_segment,
}
