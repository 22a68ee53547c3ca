"""Failed sign-ins, counted per client address, with a backoff.

A client may get the token wrong FREE_FAILURES times in a row; after that each failure
locks it out for BASE_DELAY doubled per failure beyond the free ones, up to MAX_DELAY.
While locked out, its attempts are answered 429 with ``Retry-After`` and the token it sent
is not even compared: the right token does not get in either. A success clears the count,
and a client that stops failing is forgotten after FORGET_AFTER. What counts is a token
given to the login form or in an ``Authorization: Bearer`` header; a stale session cookie
is not a guess and does not count.

The address is the connection's peer, or the ``X-Forwarded-For`` of a trusted proxy as
uvicorn reads it (``FORWARDED_ALLOW_IPS``, 127.0.0.1 by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
BASE_DELAY = 1.0
MAX_DELAY = 300.0
FORGET_AFTER = 3600.0
# Addresses tracked at most; past it the one that failed longest ago is forgotten.
MAX_CLIENTS = 10_000
# Past this many doublings the delay is MAX_DELAY anyway (and 2**n stays a small number).
_MAX_DOUBLINGS = 40


@dataclass
class _Record:
    failures: int
    last_failure: float
    locked_until: float


class LoginThrottle:
    """Failed sign-ins by client address, and how long each must wait."""

    # Alike the constructors of LogBudget (log_budget.py) and SessionStore (sessions.py)
    # by shape only: limits and a clock kept as given, different data.
    def __init__(
        self,
        *,
        free: int = FREE_FAILURES,
        base_delay: float = BASE_DELAY,
        max_delay: float = MAX_DELAY,
        forget_after: float = FORGET_AFTER,
        limit: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.forget_after = forget_after
        self.limit = limit
        self.clock = clock
        self._clients: dict[str, _Record] = {}

    def wait(self, client: str) -> float:
        """Seconds ``client`` must wait before its next attempt counts (0: now)."""
        record = self._record(client)
        return 0.0 if record is None else max(0.0, record.locked_until - self.clock())

    def failed(self, client: str) -> tuple[int, float]:
        """Count a failure: (failures in a row, seconds the client is now locked out)."""
        now = self.clock()
        record = self._record(client)
        if record is None:
            if len(self._clients) >= self.limit:
                oldest = min(self._clients, key=lambda key: self._clients[key].last_failure)
                del self._clients[oldest]
            record = self._clients[client] = _Record(0, now, now)
        record.failures += 1
        record.last_failure = now
        beyond = record.failures - self.free
        doublings = min(beyond - 1, _MAX_DOUBLINGS)
        delay = 0.0 if beyond <= 0 else min(self.base_delay * 2**doublings, self.max_delay)
        record.locked_until = now + delay
        return record.failures, delay

    def succeeded(self, client: str) -> None:
        """The client gave the token: its failures are forgotten."""
        self._clients.pop(client, None)

    def _record(self, client: str) -> _Record | None:
        record = self._clients.get(client)
        if record is not None and self.clock() - record.last_failure >= self.forget_after:
            del self._clients[client]
            return None
        return record
