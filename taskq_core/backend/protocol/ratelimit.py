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
from typing import Literal, NamedTuple, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.durations import format_duration

LimitKind = Literal["token_bucket", "sliding_window", "reservation"]
LimitStoreName = Literal["postgres", "redis"]


@dataclass(frozen=True, slots=True)
class LimitGrant:
    """One acquire's answer.

    ``allowed``: the call took a token (or a window entry). Denied, ``retry_after`` is the
    call's place in the limit's line, on the store's clock: one interval (1/rate, or
    window/limit) after the previous denied call's place, whichever worker made it, and never
    before a token or entry is free; zero when allowed. The line is kept with the limit's
    state, so denied calls come back at about the rate the limit admits them. ``remaining``
    is what is left after this call when the store knows it cheaply (tokens, free window
    entries), else None.
    """

    allowed: bool
    retry_after: timedelta = timedelta(0)
    remaining: float | None = None


def grants_of(
    granted: int,
    costs: Sequence[int],
    *,
    remaining: float | None,
    wait: timedelta,
    step: timedelta,
) -> list[LimitGrant]:
    """The answers to calls costing ``costs`` of which the first ``granted`` took their
    tokens: the others wait from ``wait``, each one ``step`` per unit of its own cost after
    the one before (their places in the line)."""
    left = None if remaining is None else float(remaining)
    grants = [LimitGrant(True, remaining=left)] * granted
    for cost in costs[granted:]:
        if len(grants) > granted:
            wait += step * cost
        grants.append(LimitGrant(False, wait, 0.0))
    return grants


async def acquire_one_token(
    store: LimiterStore, key: str, rate: float, burst: float, cost: int = 1
) -> LimitGrant:
    """``acquire_token`` as one call of ``acquire_tokens``: every store binds this as its own
    method (``acquire_token = acquire_one_token``), so a call costs what a method would."""
    return (await store.acquire_tokens(key, rate, burst, (cost,)))[0]


@dataclass(frozen=True, slots=True)
class LimitDefinition:
    """A limit as a worker enforces it, recorded for readers without the code (``top``).

    ``capacity`` is the burst, the window's limit or the slots; ``per_second`` a bucket's
    refill; ``span`` a window's length. ``keyed``: one instance per payload key, named
    ``<name>:<key>``. ``store``: where a rate limit's state lives (reservations: postgres).
    """

    name: str
    kind: LimitKind
    capacity: float
    per_second: float | None = None
    span: timedelta | None = None
    keyed: bool = False
    store: LimitStoreName = "postgres"

    def rule(self) -> str:
        """``token bucket 10/s, burst 10``, ``window 100 per 1m``, ``2 slots`` (+ ``per key``)."""
        keyed = " per key" if self.keyed else ""
        if self.kind == "token_bucket":
            return f"token bucket {self.per_second:g}/s, burst {self.capacity:g}{keyed}"
        if self.kind == "sliding_window":
            span = format_duration(self.span) if self.span is not None else "?"
            return f"window {self.capacity:g} per {span}{keyed}"
        return f"{self.capacity:g} slots{keyed}"


class IdleStateSwept(NamedTuple):
    """What ``sweep_idle_limiter_state`` deleted: buckets, window keys (all their entries),
    and lines of denied calls that ended."""

    buckets: int
    windows: int
    lines: int


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One instance of a limit and its use now: tokens spent of the burst (refill counted),
    entries within the window, slots held. ``used`` None: the state is in Redis, which the
    backend does not read. A limit with no state yet has one row, its name, used 0."""

    limit: LimitDefinition
    instance: str
    used: float | None

    @property
    def share(self) -> float | None:
        """``used`` as a share of the capacity (0 to 1)."""
        return None if self.used is None else min(self.used / self.limit.capacity, 1.0)


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

    async def acquire_token(self, key: str, rate: float, burst: float, cost: int = 1) -> LimitGrant:
        """Take ``cost`` tokens (1 to ``burst``: callers check) from bucket ``key``, which
        refills ``rate`` tokens a second up to ``burst`` (a bucket never seen is full), all or
        none. Denied: retry_after is the call's place in the bucket's line (``LimitGrant``),
        no sooner than ``cost`` tokens will be there; the line moves on ``cost`` intervals."""

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        """One ``acquire_token`` call per entry of ``costs``, at once, in one atomic step: a
        grant for each, in order (the tokens there go to the first calls they cover; from
        the first call they do not cover on, the calls get successive places in the line)."""

    async def acquire_window(
        self, key: str, limit: int, window: timedelta, cost: int = 1
    ) -> LimitGrant:
        """Record ``cost`` uses (1 to ``limit``: callers check) in window ``key`` if at most
        ``limit`` uses then fall within the last ``window``, all or none. Denied: retry_after
        is the call's place in the window's line (``LimitGrant``), no sooner than enough of
        the oldest uses leave the window; the line moves on ``cost`` places."""


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
        """The leaked-slot sweep: free the slots whose lease ran out (their worker died or lost
        the job) or whose job is not running under the slot's worker any more; how many."""

    async def sweep_idle_limiter_state(self, idle: timedelta, limit: int = 1000) -> IdleStateSwept:
        """Delete limiter state unused for ``idle`` beyond the time it takes to come back to
        rest (a bucket's refill to its whole burst, a window's span, per the registered
        definition): at most ``limit`` buckets and ``limit`` window keys. No admission
        decision changes (a bucket without state is full, a window without entries is empty);
        keyed limits stop keeping one instance per key they ever saw. Reservation slots
        stay."""

    async def list_held_reservation_slots(self, name: str | None = None) -> list[HeldSlot]:
        """Slots held now (lease not run out), by name and slot; only ``name``'s when given."""

    async def get_queue_caps(self, queues: Sequence[str]) -> dict[str, int]:
        """``queues.max_concurrent`` of those of ``queues`` that set one (the worker's queue
        reservations): one read of the queue rows, no job counted."""

    async def register_rate_limits(self, definitions: Sequence[LimitDefinition]) -> None:
        """Upsert these definitions (a worker's start: the code's limits win)."""

    async def get_rate_limit_usage(self, instances_per_limit: int = 20) -> list[LimitUsage]:
        """Every registered limit with its use now, on the backend's clock: per limit, its
        most used instances first, at most ``instances_per_limit`` (a keyed limit may have
        thousands); limits by name."""
