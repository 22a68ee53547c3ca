"""Rate limits and reservations on PostgreSQL (sql/ratelimit.sql): token buckets, sliding
windows and reservation slots, each acquire one statement on the server's clock.

A sliding window and a reservation are rows sized ahead of their first use (a window holds
exactly ``limit`` entries, a reservation ``slots`` slot rows). Each is sized once per process
and size; a window found without entries (another process removed them) is sized again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from itertools import accumulate
from uuid import UUID

# Names memory/ratelimit.py imports too, on purpose: both implement protocol.ratelimit.
from taskq_core.backend.protocol.ratelimit import (
    HeldSlot,
    IdleStateSwept,
    LimitDefinition,
    LimitGrant,
    LimitUsage,
    acquire_one_token,
    grants_of,
)

from .core import BackendCore

_ALLOWED = LimitGrant(True)
# The (key, size) pairs remembered as sized are forgotten past this many (keyed limits see
# ever new keys); a forgotten pair costs one idempotent sizing statement at its next use.
_SIZED_KEPT = 10_000


def _seconds(value: float | None, fallback: float) -> timedelta:
    """A retry_after from a statement's seconds (never negative; ``fallback`` when unknown)."""
    return timedelta(seconds=max(fallback if value is None else value, 0.0))


# Mirrors memory/ratelimit.py on purpose: both implement protocol.ratelimit, so each method
# restates its signature (mypy checks the match).
class RateLimitPart(BackendCore):
    """The limiter state store and reservation slots of PostgresBackend."""

    # (key, size) pairs this process has sized: windows and reservations.
    _sized_windows: set[tuple[str, int]] | None = None
    _sized_reservations: set[tuple[str, int]] | None = None

    def _window_sizes(self) -> set[tuple[str, int]]:
        if self._sized_windows is None or len(self._sized_windows) > _SIZED_KEPT:
            self._sized_windows = set()
        return self._sized_windows

    def _reservation_sizes(self) -> set[tuple[str, int]]:
        if self._sized_reservations is None or len(self._sized_reservations) > _SIZED_KEPT:
            self._sized_reservations = set()
        return self._sized_reservations

    acquire_token = acquire_one_token

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        # One statement: the first granted while tokens last, the others placed in the bucket's
        # line. It reads the costs summed up, call by call.
        upto = list(accumulate(costs, initial=0))[1:]
        record = await self._one(self._queries["acquire_tokens"], key, rate, burst, upto)
        return grants_of(
            int(record["granted"]),
            costs,
            remaining=record["remaining"],
            wait=_seconds(record["wait"], 1.0 / rate),
            step=timedelta(seconds=1.0 / rate),
        )

    async def acquire_window(
        self, key: str, limit: int, window: timedelta, cost: int = 1
    ) -> LimitGrant:
        sizes = self._window_sizes()
        if (key, limit) not in sizes:
            await self._size_window(key, limit)
        step = window / limit
        query = self._queries["acquire_window_entry"]
        record = await self._one(query, key, window, step, cost)
        if not record["entries"] and not record["allowed"]:
            await self._size_window(key, limit)  # its entries were removed: size it again
            record = await self._one(query, key, window, step, cost)
        if record["allowed"]:
            return _ALLOWED
        return LimitGrant(False, _seconds(record["wait"], window.total_seconds()), 0.0)

    async def _size_window(self, key: str, limit: int) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(self._queries["lock_window_key"], key)
            await conn.execute(self._queries["size_window_entries"], key, limit)
        self._window_sizes().add((key, limit))

    async def acquire_reservation(
        self, name: str, slots: int, job_id: UUID, worker_id: UUID, lease: timedelta
    ) -> bool:
        sizes = self._reservation_sizes()
        if (name, slots) not in sizes:
            await self._pool.execute(self._queries["ensure_reservation_slots"], name, slots)
            sizes.add((name, slots))
        slot = await self._pool.fetchval(
            self._queries["acquire_reservation"], name, slots, job_id, worker_id, lease
        )
        return slot is not None

    async def get_queue_caps(self, queues: Sequence[str]) -> dict[str, int]:
        records = await self._pool.fetch(self._queries["get_queue_caps"], list(queues))
        return {r["name"]: int(r["max_concurrent"]) for r in records}

    async def release_reservations(
        self, job_id: UUID, worker_id: UUID, names: Sequence[str] | None = None
    ) -> int:
        freed = await self._pool.fetchval(
            self._queries["release_reservations"],
            job_id,
            worker_id,
            None if names is None else list(names),
        )
        return int(freed)

    async def extend_reservation_leases(
        self, worker_id: UUID, job_ids: Sequence[UUID], lease: timedelta
    ) -> int:
        # On the heartbeat pool, beside the leases.
        if not job_ids:
            return 0
        renewed = await self._heartbeat_pool.fetchval(
            self._queries["extend_reservation_leases"], worker_id, list(job_ids), lease
        )
        return int(renewed)

    async def sweep_leaked_reservation_slots(self) -> int:
        return int(await self._pool.fetchval(self._queries["sweep_leaked_reservation_slots"]))

    async def sweep_idle_limiter_state(self, idle: timedelta, limit: int = 1000) -> IdleStateSwept:
        record = await self._one(self._queries["sweep_idle_limiter_state"], idle, limit)
        return IdleStateSwept(int(record["buckets"]), int(record["windows"]), int(record["lines"]))

    async def list_held_reservation_slots(self, name: str | None = None) -> list[HeldSlot]:
        records = await self._pool.fetch(self._queries["list_held_reservation_slots"], name)
        return [
            HeldSlot(r["name"], r["slot"], r["job_id"], r["worker_id"], r["lease_expires_at"])
            for r in records
        ]

    async def register_rate_limits(self, definitions: Sequence[LimitDefinition]) -> None:
        # One statement.
        if not definitions:
            return
        await self._pool.execute(
            self._queries["register_rate_limits"],
            [d.name for d in definitions],
            [d.kind for d in definitions],
            [d.capacity for d in definitions],
            [d.per_second for d in definitions],
            [d.span for d in definitions],
            [d.keyed for d in definitions],
            [d.store for d in definitions],
        )

    async def get_rate_limit_usage(self, instances_per_limit: int = 20) -> list[LimitUsage]:
        # On the server's clock.
        records = await self._pool.fetch(self._queries["get_rate_limit_usage"], instances_per_limit)
        usage = []
        for r in records:
            limit = LimitDefinition(
                r["name"],
                r["kind"],
                r["capacity"],
                r["per_second"],
                r["span"],
                r["keyed"],
                r["store"],
            )
            in_redis = limit.store == "redis" and limit.kind != "reservation"
            used = None if in_redis else float(r["used"] or 0.0)
            usage.append(LimitUsage(limit, r["instance"] or limit.name, used))
        return usage
