"""Reads off the primary (TASKQ_PG_DSN_REPLICA): how each reader says how stale it may be.

The read-only commands print one note on stderr, the dashboards show it in their header and
the fleet metrics export it. ``StalenessWatch`` keeps the standby's last answer, read again
at most once a ``max_age`` so a dashboard's refresh pays one tiny statement at most.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from taskq_core.durations import format_duration

if TYPE_CHECKING:
    from taskq_core.backend.protocol import Backend, ReadStaleness


def describe_staleness(staleness: ReadStaleness | None, where: str) -> str:
    """How stale reads of the replica at ``where`` may be, in one line."""
    if staleness is None:
        return f"read from {where} (TASKQ_PG_DSN_REPLICA), which is a primary: not behind"
    return f"read from the replica at {where}, {brief_staleness(staleness)}"


def brief_staleness(staleness: ReadStaleness | None) -> str:
    """``describe_staleness`` without the place: ``12ms behind the primary``."""
    if staleness is None:
        return "a primary, not behind"
    if not staleness.streaming:
        last = staleness.last_replayed_at
        since = "it has replayed nothing" if last is None else f"last change {_ago(last)} ago"
        return f"not streaming from its primary ({since})"
    if staleness.behind is None:
        return "nothing replayed yet"
    return f"{format_duration(timedelta(seconds=staleness.behind))} behind the primary"


def _ago(moment: datetime) -> str:
    return format_duration(max(datetime.now(UTC) - moment, timedelta(0)))


@dataclass
class StalenessWatch:
    """The replica ``backend`` reads, at ``where``: its staleness as last read. Concurrent
    callers share one read; a read that fails leaves the staleness unknown, never the
    caller's own read failed (the page, the snapshot, the scrape)."""

    backend: Backend
    where: str
    max_age: float = 1.0
    last: ReadStaleness | None = None
    failed: bool = False
    _read_at: float = field(default=float("-inf"), init=False, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def refresh(self) -> str:
        """``brief_staleness``, read on the standby when the last read is ``max_age`` old."""
        async with self._lock:
            if time.monotonic() - self._read_at >= self.max_age:
                self.last, self.failed = await read_staleness(self.backend)
                self._read_at = time.monotonic()
        return UNKNOWN if self.failed else brief_staleness(self.last)

    @property
    def note(self) -> str | None:
        """``describe_staleness`` of the last read (None before the first)."""
        if self._read_at == float("-inf"):
            return None
        if self.failed:
            return f"read from the replica at {self.where}, {UNKNOWN}"
        return describe_staleness(self.last, self.where)


# What a reader says when the standby did not answer how far behind it is.
UNKNOWN = "how far behind the primary unknown"


async def read_staleness(backend: Backend) -> tuple[ReadStaleness | None, bool]:
    """The standby's staleness and whether the read failed (it never raises: a reader says
    it does not know rather than fail what it read)."""
    try:
        return await backend.get_read_staleness(), False
    except Exception:
        return None, True
