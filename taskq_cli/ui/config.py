"""What one ``taskq ui serve`` process was started with."""

from __future__ import annotations

from dataclasses import dataclass

from taskq_cli.tui.source import DashboardSource  # at run time: Litestar resolves the hints

# The htmx build vendored in static/ (its licence beside it): templates load it by this name.
HTMX_FILE = "htmx-2.0.11.min.js"
# How often a page's live part is fetched again.
DEFAULT_REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class UiConfig:
    """The server's options: the token every request must carry (None: none asked), whether
    actions are hidden and refused, and how often pages refresh."""

    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS


@dataclass(frozen=True)
class Ui:
    """What every handler gets (the ``ui`` dependency): the read model and the options.

    A concrete class rather than the DashboardSource protocol itself, which Litestar's
    signature check cannot test instances against."""

    source: DashboardSource
    config: UiConfig
