"""RateLimiter: admits a claimed job under its actor's limits before the body runs.

Admission takes the job's reservation slots first, then the tokens (or window entries) of each
rate limit, in declaration order: one, or the job's cost under a weighted limit (a cost of 0
asks nothing of the store). The first limit that says no denies the job: the slots it
took are given back and the job returns to ``scheduled`` for the retry_after the limiter
names, without using an attempt (the consumer writes that).

The token takes of admissions that run together share one store call (``TokenRequests``).

Denied jobs come back paced rather than all at once. A rate limit's store gives each denied
call a place in the limit's line, fleet-wide (``LimitGrant``): one interval after the previous
denied call's, so a backlog returns at about the rate the limit admits it, whichever workers
denied it and whenever they started. A reservation's denials, and those of a store that is
away, wait in this worker's own lines (``pacing.DenialLines``), spaced for the workers that run
the actor.

A queue whose ``queues.max_concurrent`` is set is a reservation too, fleet-wide, named by
``queue_concurrency_reservation_name``: every job of the queue takes one of its slots before
its actor's own (the dispatch statement's cap only pre-filters: several workers dispatching at
once can each see room for the same free place).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal
from uuid import UUID

from taskq_core.backend.protocol.ratelimit import LimiterStore, RateLimitBackend
from taskq_core.clock import Clock
from taskq_core.obs.metrics import instruments, labels
from taskq_core.ratelimit.coalesce import TokenRequests
from taskq_core.ratelimit.fallback import LimiterStoreUnavailableError
from taskq_core.ratelimit.pacing import DenialLines
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
# Hold times are forgotten, oldest first, past this many reservations (keyed ones).
_HOLDS_KEPT = 10_000

DenialKind = Literal["rate_limit", "reservation", "limit_store_unavailable"]


def queue_concurrency_reservation_name(queue: str) -> str:
    """The reservation that caps ``queue``'s running jobs at its max_concurrent (a colon, which
    no registered limit's name holds, keeps it apart from them)."""
    return f"queue-cap:{queue}"


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
        self.lines = DenialLines(clock)
        self.tokens = TokenRequests(store)
        self.fleet: dict[str, int] = {}  # actor -> live workers running it (see set_fleet)
        self._holding: dict[UUID, tuple[tuple[str, ...], float]] = {}  # job -> (slots, since)
        self._hold_times: dict[str, float] = {}  # reservation -> moving average of holds (s)
        self.queue_caps: dict[str, int] = {}  # queue -> max_concurrent (see set_queue_caps)

    def applies(self, actor: str, queue: str) -> bool:
        """Whether a job of ``actor`` in ``queue`` is under any limit (its actor's, its
        queue's cap)."""
        return actor in self.plans or queue in self.queue_caps

    def set_queue_caps(self, caps: dict[str, int]) -> None:
        """The max_concurrent of the capped queues this worker consumes (read at start and at
        every heartbeat)."""
        self.queue_caps = dict(caps)

    def holding(self) -> list[UUID]:
        """Jobs that hold reservation slots now (the heartbeat renews their leases)."""
        return list(self._holding)

    async def admit(
        self, actor: str, payload: Any, job_id: UUID, worker_id: UUID, queue: str | None = None
    ) -> Admission | Denial:
        """Take the job's slots (its queue's cap first) and tokens, or say which limit denies
        it.

        Raises KeyFunctionError when a keyed limit cannot name the job's key, and its
        CostFunctionError when a weighted limit cannot price the job (nothing is held then).
        """
        plan = self.plans.get(actor)
        cap = None if queue is None else self.queue_caps.get(queue)
        if plan is None and cap is None:
            return ADMITTED
        reservations: list[tuple[str, int]] = []
        if cap is not None:
            assert queue is not None
            reservations.append((queue_concurrency_reservation_name(queue), cap))
        rate_limits: list[tuple[LimitUse, str, int]] = []
        if plan is not None:
            reservations += [(use.instance(payload), _slots(use)) for use in plan.reservations]
            rate_limits = [
                (use, use.instance(payload), use.units(payload)) for use in plan.rate_limits
            ]
        held: list[str] = []
        try:
            for name, slots in reservations:
                if not await self.slots.acquire_reservation(
                    name, slots, job_id, worker_id, self.lease
                ):
                    await self._give_back(job_id, worker_id, held)
                    low, high = RESERVATION_RETRY_BOUNDS
                    turnover = self._hold_times.get(name, RESERVATION_HOLD_GUESS) / slots
                    wait = min(max(turnover, low), high)
                    return self._deny(actor, "reservation", name, timedelta(seconds=wait), wait)
                held.append(name)
            for use, name, cost in rate_limits:
                denial = await self._take(actor, use, name, cost)
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
        if len(self._hold_times) > _HOLDS_KEPT:  # keyed reservations: forget the oldest
            self._hold_times.pop(next(iter(self._hold_times)))
        return await self.slots.release_reservations(job_id, worker_id, list(held))

    def forget(self, job_ids: Iterable[UUID]) -> None:
        """Stop renewing these jobs' slots (their leases run out; the leaked-slot sweep frees
        them)."""
        for job_id in job_ids:
            self._holding.pop(job_id, None)

    async def _give_back(self, job_id: UUID, worker_id: UUID, held: list[str]) -> None:
        if held:
            await self.slots.release_reservations(job_id, worker_id, held)
            held.clear()

    async def _take(self, actor: str, use: LimitUse, name: str, cost: int) -> Denial | None:
        limit = use.limit
        if not cost:  # a computed cost of 0: this job uses none of the limit
            return None
        try:
            if isinstance(limit, TokenBucket):
                grant = await self.tokens.take(name, limit.per_second, limit.capacity, cost)
            else:
                assert isinstance(limit, SlidingWindow)
                grant = await self.store.acquire_window(name, limit.limit, limit.window, cost)
        except LimiterStoreUnavailableError:
            return self._deny(
                actor,
                "limit_store_unavailable",
                name,
                STORE_UNAVAILABLE_RETRY_AFTER,
                _interval(limit) * cost,
            )
        if grant.allowed:
            return None
        _count_denial(actor, "rate_limit")
        return Denial("rate_limit", name, grant.retry_after)  # the store's line placed it

    def _deny(
        self, actor: str, kind: DenialKind, name: str, retry_after: timedelta, interval: float
    ) -> Denial:
        """A denial at the next place of this worker's line for ``name`` (never before
        ``retry_after``), spaced for the workers that run ``actor``."""
        _count_denial(actor, kind)
        spacing = interval * self.fleet.get(actor, 1)
        return Denial(kind, name, self.lines.place(name, retry_after, spacing))

    def set_fleet(self, workers_per_actor: dict[str, int]) -> None:
        """How many live workers run each actor (this one included): denied jobs are spaced
        that many intervals apart in this worker's lines."""
        self.fleet = {actor: max(count, 1) for actor, count in workers_per_actor.items()}


def _count_denial(actor: str, kind: DenialKind) -> None:
    instruments().rate_limit_denials.add(
        1, labels(**{"taskq.actor": actor, "taskq.rate_limit.kind": kind})
    )


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
