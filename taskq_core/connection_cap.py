"""How many connections a small HTTP server holds, and which one gives way to a newcomer.

A slowloris attack opens many connections and sends each request a byte at a time, so the
server's slots (and its open files) go to requests that never end. ``ConnectionCap`` keeps
at most ``limit`` connections; past it, a newcomer takes the place of a connection still
waiting for its request, chosen in this order:

1. the one that has been *stalled* longest: it has sent some bytes but not a whole request
   head, or it sits idle between two requests;
2. otherwise the oldest *fresh* one (accepted, nothing read yet), once it has had
   FRESH_GRACE_SECONDS to send its request.

A connection whose request is being served never gives way, nor does a fresh one within its
grace: when every connection is one of those, the newcomer is refused. Without the grace, a
storm of reconnecting slow clients accepted in bursts could evict a real client accepted a
moment earlier, before the server had read the request it sent at once. So a real client,
which sends its whole request head at once, is being served before the cap comes round to
it, while the slow ones evict one another. The admin UI's server (taskq_cli/ui/serving.py) and the
worker's health server (worker/health.py) both use it, each with a deadline of its own on
every request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

# How long a connection that has sent nothing yet is safe from eviction: a real client's
# request head arrives well within it, even from a busy machine.
FRESH_GRACE_SECONDS = 1.0


class Closable(Protocol):
    """A connection: closing it drops it (the server then reports it ``closed``)."""

    def close(self) -> None:
        """Close the connection."""


class ConnectionCap:
    """At most ``limit`` open connections, by the rule of the module docstring.

    The server reports each connection's progress: ``admit`` when accepted, ``stalled``
    when bytes came but no whole request head (or it went idle after a response),
    ``serving`` once the head is read, ``closed`` when it is gone.
    """

    def __init__(
        self,
        limit: int,
        *,
        grace: float = FRESH_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a connection cap must be at least 1, got {limit}")
        self.limit = limit
        self.grace = grace
        self._clock = clock
        # Oldest first (dicts keep insertion order); a fresh one with when it was admitted.
        self._fresh: dict[Closable, float] = {}
        self._stalled: dict[Closable, None] = {}
        self._serving: set[Closable] = set()
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._fresh) + len(self._stalled) + len(self._serving)

    def admit(self, connection: Closable) -> bool:
        """Whether ``connection`` may stay. At the cap, the connection waiting longest is
        closed to make room; when every one is being served, the newcomer is refused (the
        caller closes it)."""
        if len(self) >= self.limit:
            victim = self._longest_waiting()
            if victim is None:
                self.refused += 1
                return False
            self.closed(victim)
            self.evicted += 1
            victim.close()
        self._fresh[connection] = self._clock()
        return True

    def stalled(self, connection: Closable) -> None:
        """Bytes came but no whole request head, or the connection is idle after a
        response; one stalled already keeps its place in the line."""
        if connection in self._stalled:
            return
        if self._forget(connection):
            self._stalled[connection] = None

    def serving(self, connection: Closable) -> None:
        """Its request head is read: it is not evicted until it waits again."""
        if self._forget(connection):
            self._serving.add(connection)

    def closed(self, connection: Closable) -> None:
        """It is gone (safe to call more than once)."""
        self._forget(connection)

    def _forget(self, connection: Closable) -> bool:
        """Take ``connection`` out of its group; whether it was held at all."""
        if connection in self._fresh:
            del self._fresh[connection]
        elif connection in self._stalled:
            del self._stalled[connection]
        elif connection in self._serving:
            self._serving.remove(connection)
        else:
            return False
        return True

    def _longest_waiting(self) -> Closable | None:
        for connection in self._stalled:
            return connection
        for connection, admitted in self._fresh.items():  # the oldest, if its grace is over
            return connection if self._clock() - admitted >= self.grace else None
        return None
