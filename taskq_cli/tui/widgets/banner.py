"""The connection banner: a visible notice while refreshes fail, gone once one succeeds.

The panes keep the last data they showed; the banner says since when that data is stale
and that the app keeps retrying, so an outage never looks like an idle queue.
"""

from __future__ import annotations

from datetime import datetime

from taskq_cli.tui.literal import LiteralStatic


class ConnectionBanner(LiteralStatic):
    """Hidden while refreshes succeed; one line naming the failure while they do not."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.notice = ""

    def show_failure(self, reason: str, unreachable: bool, last_good: datetime | None) -> None:
        """Show (or update) the notice for a failed refresh."""
        head = "database unreachable" if unreachable else "refresh failed"
        since = "" if last_good is None else f"; showing data from {last_good:%H:%M:%S} UTC"
        self.notice = f"{head}: {reason} (retrying{since})"
        self.update(self.notice)
        self.add_class("-visible")

    def clear(self) -> None:
        """Hide the notice: a refresh succeeded."""
        self.notice = ""
        self.update("")
        self.remove_class("-visible")
