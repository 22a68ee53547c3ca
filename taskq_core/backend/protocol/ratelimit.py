"""What rate limits and concurrency reservations need of a backend: the limiter state (token
buckets, sliding windows) and the reservation slots, every time predicate on the backend's own
clock (PostgreSQL: the server's; memory: the injected Clock).

A limiter state store is anything with ``acquire_token`` and ``acquire_window`` (``LimiterStore``):
both backends are one, and so is the Redis store of ``taskq_core.ratelimit``. Reservation slots
live only here, in ``reservation_slots`` rows held with a lease the worker's heartbeat renews.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable
from uuid import UUID


@dataclass(frozen=True, slots=True)
class LimitGrant:
    """One acquire's answer.

    ``allowed``: the call took a token (or a window entry). Denied, ``retry_after`` is how long
    until one is free on the store's clock (zero when allowed). ``remaining`` is what is left
    after this call when the store knows it cheaply (tokens, free window entries), else None.
    """

    allowed: bool
    retry_after: timedelta = timedelta(0)
    remaining: float | None = None


@dataclass(frozen=True, slots=True)
class HeldSlot:
    """A held ``reservation_slots`` row."""

    name: str
    slot: int
    job_id: UUID
    worker_id: UUID
    lease_expires_at: datetime


@runtime_checkable
class LimiterStore(Protocol):
    """Token buckets and sliding windows, keyed by the limit's name (with its key, for a keyed
    limit). Each acquire is atomic on the store's own clock, whatever the caller's clock says.
    """

    async def acquire_token(self, key: str, rate: float, burst: float) -> LimitGrant:
        """Take one token from bucket ``key``, which refills ``rate`` tokens a second up to
        ``burst`` (a bucket never seen is full). Denied: retry_after is when one token will be
        there."""

    async def acquire_window(self, key: str, limit: int, window: timedelta) -> LimitGrant:
        """Record one use in window ``key`` if fewer than ``limit`` uses fall within the last
        ``window``. Denied: retry_after is when the oldest use leaves the window."""


@runtime_checkable
class RateLimitBackend(LimiterStore, Protocol):
    """The limiter state of the PostgreSQL (or in-memory) store, plus reservation slots."""

    async def acquire_reservation(
        self, name: str, slots: int, job_id: UUID, worker_id: UUID, lease: timedelta
    ) -> bool:
        """Hold one of the ``slots`` slots of reservation ``name`` for ``job_id``: a free slot
        (never held, released, or its lease run out) becomes the job's until now() + ``lease``.
        A slot the job holds already (an earlier attempt) is taken over. False when every slot
        is held."""

    async def release_reservations(
        self, job_id: UUID, worker_id: UUID, names: Sequence[str] | None = None
    ) -> int:
        """Free the slots ``job_id`` holds under ``worker_id`` (only those of ``names`` when
        given; a slot another attempt of the job took over elsewhere is not this worker's to
        free); how many."""

    async def extend_reservation_leases(
        self, worker_id: UUID, job_ids: Sequence[UUID], lease: timedelta
    ) -> int:
        """Renew, to now() + ``lease``, the slots this worker holds for ``job_ids`` (the jobs it
        still holds); how many."""

    async def sweep_leaked_reservation_slots(self) -> int:
        """Sweep 4: free the slots whose lease ran out (their worker died or lost the job) or
        whose job is not running under the slot's worker any more; how many."""

    async def held_reservation_slots(self, name: str | None = None) -> list[HeldSlot]:
        """Slots held now (lease not run out), by name and slot; only ``name``'s when given."""
