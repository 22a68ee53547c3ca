"""RateLimiter: admits a claimed job under its actor's limits before the body runs.

Admission takes the job's reservation slots first, then one token (or window entry) of each
rate limit, in declaration order. The first limit that says no denies the job: the slots it
took are given back and the job returns to ``scheduled`` for the retry_after the limiter
names, without using an attempt (the consumer writes that). A rate limit denied earlier is
answered here without asking the store again until its retry_after has passed: no token can
appear before then, since only time refills a bucket and empties a window.

Denied jobs come back in a paced line rather than all at once: each limit keeps a line end,
and each denial takes the next place in it, one limit interval (1/rate for a bucket,
window/limit for a window, a slot's turnover for a reservation) after the previous one, never
sooner than the store's retry_after.
A backlog of thousands of jobs then returns at about the limit's rate instead of being claimed
and denied again every second, which would cost the queue what the limit saves. The line is
this process's own; each worker paces the jobs it denied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal
from uuid import UUID

from taskq_core.backend.protocol.ratelimit import LimiterStore, RateLimitBackend
from taskq_core.clock import Clock
from taskq_core.ratelimit.fallback import LimiterStoreUnavailableError
from taskq_core.ratelimit.primitives import ConcurrencyReservation, SlidingWindow, TokenBucket
from taskq_core.ratelimit.registry import ActorLimits, LimitUse

# A denied reservation cannot know when a slot frees. Its jobs come back after the time one
# slot takes to turn over: how long this worker's jobs held a slot of it (a moving average),
# shared by its slots; this hold time is assumed until one was seen, and the wait is kept
# between these bounds.
RESERVATION_HOLD_GUESS = 1.0
RESERVATION_RETRY_BOUNDS = (0.05, 60.0)
_HOLD_WEIGHT = 0.2  # of the newest hold time in the moving average
# A limit whose store is away (Redis down, no fallback) holds its jobs back this long.
STORE_UNAVAILABLE_RETRY_AFTER = timedelta(seconds=5)
# Lines past their end are forgotten once this many limits have one (keyed limits).
_LINES_KEPT = 10_000

DenialKind = Literal["rate_limit", "reservation", "limit_store_unavailable"]


@dataclass(frozen=True)
class Denial:
    """The limit that holds the job back, and for how long."""

    kind: DenialKind
    limit: str
    retry_after: timedelta

    @property
    def reason(self) -> str:
        """``rate_limit:<limit>``: what the job's event records (``jobs explain`` reads it)."""
        return f"{self.kind}:{self.limit}"


@dataclass(frozen=True)
class Admission:
    """A job admitted; ``held`` names the reservation slots it holds until released."""

    held: tuple[str, ...] = ()


ADMITTED = Admission()


class RateLimiter:
    """The worker's admission control: resolved actor limits over a limiter store (tokens,
    windows) and a backend's reservation slots."""

    def __init__(
        self,
        plans: dict[str, ActorLimits],
        store: LimiterStore,
        slots: RateLimitBackend,
        *,
        clock: Clock,
        lease: timedelta,
    ) -> None:
        self.plans = {actor: plan for actor, plan in plans.items() if plan}
        self.store = store
        self.slots = slots
        self.clock = clock
        self.lease = lease  # a slot's lease; the heartbeat renews it with the job's
        self._closed: dict[str, float] = {}  # limit -> monotonic time a token may be there
        self._lines: dict[str, float] = {}  # limit -> monotonic end of its line of denials
        self._holding: dict[UUID, tuple[tuple[str, ...], float]] = {}  # job -> (slots, since)
        self._hold_times: dict[str, float] = {}  # reservation -> moving average of holds (s)

    def applies(self, actor: str) -> bool:
        """Whether ``actor`` declares any limit."""
        return actor in self.plans

    def holding(self) -> list[UUID]:
        """Jobs that hold reservation slots now (the heartbeat renews their leases)."""
        return list(self._holding)

    async def admit(
        self, actor: str, payload: Any, job_id: UUID, worker_id: UUID
    ) -> Admission | Denial:
        """Take the job's slots and tokens, or say which limit denies it.

        Raises KeyFunctionError when a keyed limit cannot name the job's key (nothing is
        held then).
        """
        plan = self.plans.get(actor)
        if plan is None:
            return ADMITTED
        reservations = [(use, use.instance(payload)) for use in plan.reservations]
        rate_limits = [(use, use.instance(payload)) for use in plan.rate_limits]
        held: list[str] = []
        try:
            for use, name in reservations:
                slots = _slots(use)
                if not await self.slots.acquire_reservation(
                    name, slots, job_id, worker_id, self.lease
                ):
                    await self._give_back(job_id, worker_id, held)
                    low, high = RESERVATION_RETRY_BOUNDS
                    turnover = self._hold_times.get(name, RESERVATION_HOLD_GUESS) / slots
                    wait = min(max(turnover, low), high)
                    return self._deny("reservation", name, timedelta(seconds=wait), wait)
                held.append(name)
            for use, name in rate_limits:
                denial = await self._take(use, name)
                if denial is not None:
                    await self._give_back(job_id, worker_id, held)
                    return denial
        except BaseException:
            await self._give_back(job_id, worker_id, held)
            raise
        if held:
            self._holding[job_id] = (tuple(held), self.clock.monotonic())
        return Admission(tuple(held))

    async def release(self, job_id: UUID, worker_id: UUID) -> int:
        """Give back every slot ``job_id`` holds here; how many were freed."""
        held, since = self._holding.pop(job_id, ((), 0.0))
        if not held:
            return 0
        took = self.clock.monotonic() - since
        for name in held:
            known = self._hold_times.get(name)
            self._hold_times[name] = (
                took if known is None else known + _HOLD_WEIGHT * (took - known)
            )
        if len(self._hold_times) > _LINES_KEPT:  # keyed reservations: forget the oldest
            self._hold_times.pop(next(iter(self._hold_times)))
        return await self.slots.release_reservations(job_id, worker_id, list(held))

    def forget(self, job_ids: Iterable[UUID]) -> None:
        """Stop renewing these jobs' slots (their leases run out; Sweep 4 frees them)."""
        for job_id in job_ids:
            self._holding.pop(job_id, None)

    async def _give_back(self, job_id: UUID, worker_id: UUID, held: list[str]) -> None:
        if held:
            await self.slots.release_reservations(job_id, worker_id, held)
            held.clear()

    async def _take(self, use: LimitUse, name: str) -> Denial | None:
        limit = use.limit
        now = self.clock.monotonic()
        closed_until = self._closed.get(name)
        interval = _interval(limit)
        if closed_until is not None and now < closed_until:
            return self._deny("rate_limit", name, timedelta(seconds=closed_until - now), interval)
        try:
            if isinstance(limit, TokenBucket):
                grant = await self.store.acquire_token(name, limit.per_second, limit.capacity)
            else:
                assert isinstance(limit, SlidingWindow)
                grant = await self.store.acquire_window(name, limit.limit, limit.window)
        except LimiterStoreUnavailableError:
            return self._deny(
                "limit_store_unavailable", name, STORE_UNAVAILABLE_RETRY_AFTER, interval
            )
        if grant.allowed:
            self._closed.pop(name, None)
            return None
        self._closed[name] = now + grant.retry_after.total_seconds()
        return self._deny("rate_limit", name, grant.retry_after, interval)

    def _deny(self, kind: DenialKind, name: str, retry_after: timedelta, interval: float) -> Denial:
        """A denial at the next place of ``name``'s line (never before ``retry_after``)."""
        now = self.clock.monotonic()
        if len(self._lines) > _LINES_KEPT:
            self._lines = {key: end for key, end in self._lines.items() if end > now}
        spot = max(self._lines.get(name, now), now + retry_after.total_seconds())
        self._lines[name] = spot + interval
        return Denial(kind, name, timedelta(seconds=spot - now))


def _slots(use: LimitUse) -> int:
    limit = use.limit
    assert isinstance(limit, ConcurrencyReservation)
    return limit.slots


def _interval(limit: Any) -> float:
    """Seconds between two places of a limit's line: one token, or one window entry."""
    if isinstance(limit, TokenBucket):
        return 1.0 / limit.per_second
    assert isinstance(limit, SlidingWindow)
    return limit.window.total_seconds() / limit.limit
