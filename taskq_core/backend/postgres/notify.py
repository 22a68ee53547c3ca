"""The LISTEN side of the wake mechanism: one dedicated connection per backend, fanned out to
``subscribe_wake()`` / ``subscribe_cancel_wake()`` subscribers as asyncio Events.

State model. The listener starts *idle*: no connection, no task. The first subscriber opens
the LISTEN connection (one attempt; a failure is logged and left to the supervisor) and starts
the supervisor task, which from then on alternates between *healthy* and *reconnecting*:

- healthy: every ``health_check_interval`` seconds it runs a probe query on the connection;
  asyncpg's termination callback short-circuits the wait when the server drops the session.
- reconnecting: the connection is discarded and reopened with bounded, jittered exponential
  backoff (``initial_backoff`` doubling up to ``max_backoff``). Notifications sent while
  disconnected are lost, so after a reconnect every subscriber's event is set once: each
  consumer polls the database one extra time and finds whatever arrived meanwhile.

One outage logs twice: ``notify_disconnected`` when the connection is lost and
``notify_reconnected`` (with how long it was down) when it is back; failed attempts in
between are debug records.

``close()`` stops the supervisor and closes the connection; subscribing afterwards raises.
Events are only ever set here; consumers clear them. Wake payloads are ignored; events-channel
payloads are JSON and only ``{"type": "cancel", ...}`` sets the cancel subscribers' events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import structlog

from taskq_core.backend.hooks import NO_NOTIFY_HOOKS, NotifyHooks
from taskq_core.backend.protocol.worker import ScheduledAnnouncements, subscribed
from taskq_core.constants import events_channel, wake_channel
from taskq_core.errors import TaskqError

from .errors import UNAVAILABLE
from .queries import SchemaQueries

# structlog directly (what obs.logs.get_logger returns): the driver does not import obs.
_log = structlog.get_logger(component="notify")

# On the LISTEN connection any database error means "reconnect": it runs no statement of its
# own but the probe, so nothing here can be a caller's mistake.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    *UNAVAILABLE,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a protocol stuck after the server's FATAL (errors.py)
    TaskqError,
)


class NotifyListener:
    """A lazily opened, self-healing LISTEN connection for one schema's channels."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        schema: str,
        *,
        health_check_interval: float = 5.0,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        hooks: NotifyHooks = NO_NOTIFY_HOOKS,
    ) -> None:
        self._connect = connect
        self._hooks = hooks  # telemetry, installed by whoever opened the backend
        self._schema = schema
        self._health_query = SchemaQueries(schema)["connection_health_check"]
        self._wake_channel = wake_channel(schema)
        self._events_channel = events_channel(schema)
        self._health_check_interval = health_check_interval
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._wake_subscribers: set[asyncio.Event] = set()
        self._cancel_subscribers: set[asyncio.Event] = set()
        self._scheduled_subscribers: set[ScheduledAnnouncements] = set()
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._start_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        self._closed = False
        self._lost_at: float | None = None  # monotonic time the connection was lost
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        """Whether the LISTEN connection is currently open."""
        return self._conn is not None and not self._conn.is_closed()

    @asynccontextmanager
    async def subscribe_wake(self) -> AsyncIterator[asyncio.Event]:
        """An Event set on every wake NOTIFY (and once after each reconnect)."""
        async with self._subscribe(self._wake_subscribers) as event:
            yield event

    @asynccontextmanager
    async def subscribe_cancel_wake(self) -> AsyncIterator[asyncio.Event]:
        """An Event set on every cancel NOTIFY (and once after each reconnect)."""
        async with self._subscribe(self._cancel_subscribers) as event:
            yield event

    @asynccontextmanager
    async def subscribe_scheduled(self) -> AsyncIterator[ScheduledAnnouncements]:
        """Announcements of jobs that wait for a time (scheduled events NOTIFY)."""
        await self._ensure_started()
        with ScheduledAnnouncements.held_in(self._scheduled_subscribers) as heard:
            yield heard

    @asynccontextmanager
    async def _subscribe(self, subscribers: set[asyncio.Event]) -> AsyncIterator[asyncio.Event]:
        await self._ensure_started()
        with subscribed(subscribers, asyncio.Event()) as event:
            yield event

    async def _ensure_started(self) -> None:
        if self._closed:
            raise RuntimeError("the backend is closed; cannot subscribe to wake-ups")
        if self._supervisor is not None:
            return
        async with self._start_lock:
            if self._supervisor is not None:
                return
            try:
                await self._open()
            except _CONNECTION_ERRORS as exc:
                self._note_lost(exc)
                self._lost.set()
            self._supervisor = asyncio.create_task(
                self._supervise(), name=f"taskq-notify-{self._schema}"
            )
            self._hooks.listening(self)

    async def _open(self) -> None:
        conn = await self._connect()
        try:
            await conn.add_listener(self._wake_channel, self._on_notification)
            await conn.add_listener(self._events_channel, self._on_notification)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_termination)
        self._conn = conn
        self._lost.clear()

    def _on_notification(self, _conn: Any, _pid: int, channel: str, payload: object) -> None:
        hooks = self._hooks
        if channel == self._wake_channel:
            hooks.wake_received()
            _set_all(self._wake_subscribers)
            return
        hooks.event_received()
        try:
            message = json.loads(str(payload))
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "cancel":
            hooks.cancel_received()
            _set_all(self._cancel_subscribers)
        elif message.get("type") == "scheduled" and isinstance(message.get("in"), int | float):
            for subscriber in self._scheduled_subscribers:
                subscriber.announce(float(message["in"]))

    def _on_termination(self, conn: Any) -> None:
        if conn is self._conn:
            self._lost.set()

    async def _supervise(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), timeout=self._health_check_interval)
            if await self._healthy():
                continue
            await self._reconnect()

    async def _healthy(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed() or self._lost.is_set():
            return False
        try:
            await conn.fetchval(self._health_query, timeout=self._health_check_interval)
        except _CONNECTION_ERRORS as exc:
            self._note_lost(exc)
            return False
        return True

    def _note_lost(self, exc: BaseException | None) -> None:
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            error = str(exc) if exc is not None else "the server closed the connection"
            _log.warning("notify_disconnected", schema=self._schema, error=error)

    async def _reconnect(self) -> None:
        self._note_lost(None)
        await self._discard_connection()
        delay = self._initial_backoff
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._open()
            except _CONNECTION_ERRORS as exc:
                _log.debug(
                    "notify_reconnect_failed", schema=self._schema, error=str(exc), retry_in=delay
                )
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self._max_backoff)
                continue
            self.reconnects += 1
            self._hooks.reconnected()
            down = time.monotonic() - (self._lost_at or time.monotonic())
            self._lost_at = None
            _log.info(
                "notify_reconnected",
                schema=self._schema,
                reconnects=self.reconnects,
                attempts=attempts,
                outage_seconds=round(down, 3),
            )
            # Whatever was notified while disconnected is lost: every subscriber polls once.
            _set_all(self._wake_subscribers)
            _set_all(self._cancel_subscribers)
            return

    # Closes as leader.py's LeaderPart._drop_leader_connection does, kept apart on purpose: here
    # any connection error or a cancel terminates, there only database trouble does.
    async def _discard_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=2.0)
        except _CONNECTION_ERRORS:
            conn.terminate()
        except asyncio.CancelledError:
            conn.terminate()
            raise

    async def close(self) -> None:
        """Stop the supervisor and close the LISTEN connection; idempotent."""
        self._closed = True
        self._hooks.stopped(self)
        task, self._supervisor = self._supervisor, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(*_CONNECTION_ERRORS):
            await self._discard_connection()


def _set_all(events: set[asyncio.Event]) -> None:
    for event in events:
        event.set()
