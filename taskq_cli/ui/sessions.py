"""Browser sessions of the admin UI, held by the server that made them.

Signing in with the token opens a session: its cookie is 256 random bits, unique to that
sign-in, and the server keeps only a SHA-256 digest of it with its expiry. Signing out
deletes it on the server, so a copy of the cookie is worth nothing afterwards; a session
also ends at its expiry, and every session ends when the server stops (a new token means a
restart, so changing the token ends them too). Sessions live in one process's memory: run
one ``taskq ui serve`` per address, or pin each browser to one (sticky sessions).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from datetime import timedelta

SESSION_COOKIE = "taskq_admin_session"
# Live sessions kept at most; past it the one closest to its end is dropped. Only a client
# that knows the token opens one, so this only bounds what a script signing in in a loop
# would cost.
MAX_SESSIONS = 10_000
_ID_BYTES = 32


class SessionStore:
    """The open sessions: a cookie value's digest and its expiry (Unix seconds)."""

    # Alike the constructors of LogBudget (log_budget.py) and LoginThrottle
    # (login_throttle.py) by shape only: limits and a clock kept as given, different data.
    def __init__(
        self,
        lifetime: timedelta,
        *,
        limit: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lifetime = lifetime
        self.limit = limit
        self.clock = clock
        self._expiry: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def open(self) -> str:
        """A new session's cookie value."""
        self._drop_expired()
        if len(self._expiry) >= self.limit:
            del self._expiry[min(self._expiry, key=self._expiry.__getitem__)]
        value = secrets.token_urlsafe(_ID_BYTES)
        self._expiry[_digest(value)] = self.clock() + self.lifetime.total_seconds()
        return value

    def valid(self, value: str) -> bool:
        """Whether ``value`` is the cookie of a session that is open and not expired."""
        expiry = self._expiry.get(_digest(value))
        return expiry is not None and self.clock() < expiry

    def close(self, value: str) -> None:
        """End the session (signing out); an unknown value is ignored."""
        self._expiry.pop(_digest(value), None)

    def _drop_expired(self) -> None:
        now = self.clock()
        for key in [key for key, expiry in self._expiry.items() if expiry <= now]:
            del self._expiry[key]


def _digest(value: str) -> bytes:
    """What is kept of a cookie: a dump of the server's memory does not hold live cookies."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()
