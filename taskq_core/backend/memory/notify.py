"""In-process wake-ups, the memory twin of LISTEN/NOTIFY: each subscriber gets its own
asyncio.Event, set by ``MemoryStore._wake`` (new dispatchable work) or ``_wake_cancel`` (a
cancel request for a running job) while it is subscribed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from taskq_core.backend.protocol import ScheduledAnnouncements
from taskq_core.backend.protocol.worker import subscribed

from .store import MemoryStore


class NotifyPart(MemoryStore):
    """``subscribe_wake``, ``subscribe_cancel_wake`` and ``subscribe_scheduled``."""

    @asynccontextmanager
    async def subscribe_wake(self) -> AsyncIterator[asyncio.Event]:
        with subscribed(self._wake_subscribers, asyncio.Event()) as event:
            yield event

    @asynccontextmanager
    async def subscribe_cancel_wake(self) -> AsyncIterator[asyncio.Event]:
        with subscribed(self._cancel_subscribers, asyncio.Event()) as event:
            yield event

    @asynccontextmanager
    async def subscribe_scheduled(self) -> AsyncIterator[ScheduledAnnouncements]:
        with ScheduledAnnouncements.held_in(self._scheduled_subscribers) as heard:
            yield heard
