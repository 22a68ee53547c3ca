"""The enqueue side's view of ``actor_config.max_pending``: a TTL-bounded snapshot that fails open.

Every enqueueing process refreshes the snapshot at most once per TTL. When the refresh query
fails, it keeps the last good snapshot (or the code literals) and does not retry before the TTL
runs out again, so a sick database never becomes a storm of failing capacity queries.
"""

from __future__ import annotations

from collections.abc import Callable

from taskq_core.backend.protocol import Backend
from taskq_core.obs.logs import get_logger

_log = get_logger("capacity")


class CapacityCache:
    """Stored max_pending per actor, refreshed lazily every ``ttl`` seconds."""

    def __init__(self, backend: Backend, *, ttl: float, monotonic: Callable[[], float]) -> None:
        self._backend = backend
        self._ttl = ttl
        self._monotonic = monotonic
        self._snapshot: dict[str, int | None] = {}
        self._next_refresh = 0.0

    async def max_pending(self, actor: str, declared: int | None) -> int | None:
        """The effective limit: the stored value when a row exists and is set, else the literal."""
        now = self._monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + self._ttl
            try:
                self._snapshot = await self._backend.get_actor_max_pending()
            except Exception as exc:  # fail open: keep the last good snapshot
                _log.warning("capacity_refresh_failed", error=repr(exc))
        stored = self._snapshot.get(actor)
        return stored if stored is not None else declared

    def invalidate(self) -> None:
        """Refresh on next use."""
        self._next_refresh = 0.0
