"""Small renderings the dashboard's panes share: counts, ages, sparklines, theme colours.

Colours are never literal: ``Palette.from_variables`` takes them from the running app's theme
(``App.theme_variables``), so a theme change recolours the panes and ``NO_COLOR`` (which
Textual turns into a monochrome filter) removes them everywhere at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from rich.text import Text
from textual.color import Color, ColorParseError

from taskq_cli.dashboard.queue_blockers import OLD_PENDING
from taskq_cli.output import age as _age
from taskq_core.statemachine import JobStatus

_BLOCKS = "▁▂▃▄▅▆▇█"


def count(value: int) -> str:
    """A count with thousands separators."""
    return f"{value:,}"


def age(then: datetime | None, now: datetime) -> str:
    """How long ago, compactly (``45s``, ``3m10s``); a dash for never."""
    return _age(then, now) or "-"


def short_id(job_id: UUID) -> str:
    """The last 12 hex digits of a job id: its random part, unique enough on one screen
    (a UUIDv7 starts with its timestamp, so the head is shared by jobs of one burst), and
    a suffix ``taskq jobs show`` takes. Lists use it when the full id does not fit."""
    return job_id.hex[-12:]


def sparkline(values: Sequence[int]) -> str:
    """One block character per value, scaled to the largest; zero is the lowest block."""
    peak = max(values, default=0)
    if peak <= 0:
        return _BLOCKS[0] * len(values)
    top = len(_BLOCKS) - 1
    return "".join(
        _BLOCKS[0] if value <= 0 else _BLOCKS[max(1, round(value / peak * top))] for value in values
    )


@dataclass(frozen=True)
class Palette:
    """Theme colours by meaning, as Rich style strings."""

    good: str
    warn: str
    bad: str
    muted: str
    accent: str

    @classmethod
    def from_variables(cls, variables: Mapping[str, str]) -> Palette:
        """The palette of an app's theme (``App.theme_variables``)."""
        return cls(
            good=_rich_style(variables.get("success", "")),
            warn=_rich_style(variables.get("warning", "")),
            bad=_rich_style(variables.get("error", "")),
            muted="dim",  # the theme's text-muted is relative ("auto 60%"): dim is the same idea
            accent=_rich_style(variables.get("accent", "")),
        )

    def text(self, value: str, meaning: str = "", *, right: bool = False) -> Text:
        """``value`` as literal text (never markup) in the colour of ``meaning``."""
        style = getattr(self, meaning, "") if meaning else ""
        return Text(value, style=style, justify="right" if right else None)

    def status(self, status: JobStatus, *, claimed: bool = False) -> Text:
        """A job status coloured by what it means (``claimed``: running, body not started)."""
        if claimed:
            return self.text("claimed", "muted")
        return self.text(status.value, _STATUS_MEANING.get(status, ""))

    def waited(self, waited: timedelta | None, label: str) -> Text:
        """An age that should stay small (the oldest pending job): warn after a minute,
        alarm after ten."""
        if waited is None:
            return self.text(label, "muted")
        if waited >= timedelta(minutes=10):
            return self.text(label, "bad")
        if waited >= OLD_PENDING:
            return self.text(label, "warn")
        return self.text(label)


_STATUS_MEANING = {
    JobStatus.WAITING: "muted",
    JobStatus.PENDING: "",
    JobStatus.SCHEDULED: "muted",
    JobStatus.RUNNING: "accent",
    JobStatus.SUCCEEDED: "good",
    JobStatus.FAILED: "bad",
    JobStatus.CANCELLED: "warn",
    JobStatus.CRASHED: "bad",
    JobStatus.ABANDONED: "bad",
}


def _rich_style(value: str) -> str:
    """A theme colour as a Rich style (``#rrggbb``); empty when it is not a plain colour."""
    try:
        return Color.parse(value).hex6
    except ColorParseError:
        return ""
