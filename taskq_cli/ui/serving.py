"""How ``taskq ui serve`` runs uvicorn, so that slow or many clients cannot take it down.

Every limit below bites before the token check, since it must hold for anyone who can
connect. uvicorn's own settings, where it has them:

- ``http``: h11 always (``auto`` would pick httptools when installed, which ignores the
  head size below), through ``GuardedH11Protocol``.
- ``h11_max_incomplete_event_size``: a request line and headers of MAX_HEAD_BYTES at most
  while they trickle in (400 past it). h11 measures only a head that is still incomplete;
  one that arrives whole in a single read is measured before routing (request_guard.py,
  431).
- ``timeout_keep_alive``: KEEP_ALIVE_SECONDS idle between two requests.
- ``backlog``: ACCEPT_BURST, the kernel's queue of connections not yet accepted, which is
  also how many asyncio accepts at a time: a burst then takes at most that many files
  before the cap below has closed the ones it evicts.
- ``timeout_graceful_shutdown``: SIGTERM ends the server within SHUTDOWN_SECONDS even when
  clients hold requests open.
- ``ws="none"``, ``access_log=False``, ``log_config=None``: no websockets; uvicorn's warnings
  and errors go through TaskQ's logging (one format) and a LogBudget.

What uvicorn lacks, ``GuardedH11Protocol`` adds:

- **A deadline on the request head**: HEAD_SECONDS from the connection (or from the end of
  the previous response) to the end of the headers, however slowly they trickle in;
  uvicorn's keep-alive timer restarts at every byte, so a slowloris never meets it.
- **A deadline on the body**: BODY_SECONDS from the end of the head. The body's size is
  Litestar's ``request_max_body_size`` (app.py: 413 past it).
- **A connection cap** (taskq_core/connection_cap.py): at most ``ServeLimits.connections``;
  past it a newcomer takes the place of the connection that has waited longest without
  sending a whole request head, never of one being served. The cap is below the process's
  limit on open files (RLIMIT_NOFILE) less RESERVED_FILES for the database pool, the
  static files and an accept burst, so ``accept`` never fails for want of files (it once
  logged 303,000 tracebacks in 40 s).

uvicorn's ``limit_concurrency`` is not used: it answers 503 to a request once that many
connections are open, idle ones included, so under a slowloris it refuses exactly the real
request it should protect, and it acts only after the request is read, saving no file.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from taskq_cli.ui.log_budget import LogBudget
from taskq_core.connection_cap import ConnectionCap

HEAD_SECONDS = 10.0
BODY_SECONDS = 30.0
KEEP_ALIVE_SECONDS = 5
SHUTDOWN_SECONDS = 10
MAX_HEAD_BYTES = 16 * 1024
ACCEPT_BURST = 32
# Connections held at most, whatever the file limit allows: a team's browsers need tens.
MAX_CONNECTIONS = 256
# Files kept for everything but client connections: the pool, the static files, an accept
# burst and the connections the cap has evicted but the loop has not closed yet.
RESERVED_FILES = 64 + 3 * ACCEPT_BURST
MIN_CONNECTIONS = 16

_log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class ServeLimits:
    """The limits of one server (the module docstring says why each is what it is)."""

    connections: int
    head_seconds: float = HEAD_SECONDS
    body_seconds: float = BODY_SECONDS


def connection_limit(files: int | None = None) -> int:
    """How many connections to hold, given the soft limit on open files (read from the
    process when None)."""
    if files is None:
        files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if files == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, files - RESERVED_FILES))


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a head deadline, a body deadline and the connection
    cap; ``bound`` makes the class a server uses (its cap and limits)."""

    cap: ClassVar[ConnectionCap]
    limits: ClassVar[ServeLimits]
    budget: ClassVar[LogBudget]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = "head"

    @classmethod
    def bound(
        cls, cap: ConnectionCap, limits: ServeLimits, budget: LogBudget
    ) -> type[GuardedH11Protocol]:
        """A subclass holding one server's cap, limits and log budget."""
        attributes = {"cap": cap, "limits": limits, "budget": budget}
        return type(cls.__name__, (cls,), attributes)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        evicted = self.cap.evicted
        if not self.cap.admit(self):
            self._note("connection cap reached: refused a connection, every one is busy")
            transport.abort()
            return
        if self.cap.evicted != evicted:
            self._note("connection cap reached: closed the connection waiting longest")
        self._arm(self.limits.head_seconds)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.cap.closed(self)
        super().connection_lost(exc)

    def close(self) -> None:
        """Drop the connection (the cap evicts it)."""
        self._disarm()
        self.transport.close()

    def _follow(self) -> None:
        """Move the deadline and the cap's view along with the request's progress."""
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:  # no whole head yet, or idle after a response
            if self._phase != "head":
                self._phase = "head"
                self._arm(self.limits.head_seconds)
            self.cap.stalled(self)
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._phase = "body"
                self._arm(self.limits.body_seconds)
                self.cap.serving(self)
        elif self._phase != "served":
            self._phase = "served"
            self._disarm()
            self.cap.serving(self)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _note(self, message: str) -> None:
        held = self.budget.take(message)
        if held is not None:
            suffix = f" ({held} more like it were not logged)" if held else ""
            _log.warning("%s%s", message, suffix)


def uvicorn_config(app: Any, limits: ServeLimits, budget: LogBudget) -> uvicorn.Config:
    """uvicorn's settings for the admin UI (the module docstring says why)."""
    # Alike the EnqueueItem call in commands/enqueue.py by shape only: keyword arguments.
    return uvicorn.Config(
        app,
        http=GuardedH11Protocol.bound(ConnectionCap(limits.connections), limits, budget),
        ws="none",
        lifespan="on",
        log_level="warning",
        log_config=None,
        access_log=False,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        backlog=ACCEPT_BURST,
    )
