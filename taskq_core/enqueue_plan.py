"""What every enqueue does before its insert: the item types, and the planner that prepares them.

``EnqueueItem`` is one job as the caller gives it. ``EnqueuePlanner.prepare`` resolves what
the jobs of each distinct actor share (``ActorPlan``: its ref, or the queue, retry policy and
priority its workers stored) and returns a ``PreparedBatch`` whose items are built (their
payloads validated) only when read; ``check_capacity`` refuses what ``max_pending`` would not
admit. JobsClient and its batch and schedule methods share one planner, so none of them
reaches into another's privates.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, overload

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import ActorConfigRow, Backend, EnqueueArgs, from_values
from taskq_core.backend.protocol.batches import BATCH_ID_KEY
from taskq_core.backend.protocol.unique import check_unique
from taskq_core.backend.protocol.values import stored_retry
from taskq_core.capacity import CapacityCache
from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.enqueue_conflict import OnConflict, check_on_conflict
from taskq_core.errors import ConfigError, MaxPendingExceededError, UnknownActorError
from taskq_core.names import check_name
from taskq_core.obs.metrics import instruments, labels
from taskq_core.retry import DEFAULT_RETRY_POLICY, RetryPolicy

NOT_OPEN = "JobsClient is not open: use 'async with JobsClient(...)' or await open()"


@dataclass(frozen=True)
class EnqueueItem:
    """One job of a batch: an actor (ref or name), its payload and per-job options."""

    actor: ActorRef | str
    payload: BaseModel | dict[str, Any] | None = None
    delay: timedelta | float | None = None
    queue: str | None = None
    priority: int | None = None
    identity_key: str | None = None
    fairness_key: str | None = None
    schedule_to_close: timedelta | float | None = None
    metadata: dict[str, Any] | None = None
    unique_key: str | None = None
    unique_for: timedelta | float | None = None
    run_at: datetime | None = None
    on_conflict: OnConflict = "raise"

    def __post_init__(self) -> None:
        _check_unique(self.unique_key, self.unique_for)
        _check_start(self.delay, self.run_at)
        check_on_conflict(self.on_conflict, self.unique_key)


def _check_start(delay: timedelta | float | None, run_at: datetime | None) -> None:
    """``run_at`` is an absolute, timezone-aware time, given instead of ``delay``."""
    if run_at is None:
        return
    if delay is not None:
        raise ConfigError("give delay or run_at, not both")
    if not isinstance(run_at, datetime) or run_at.utcoffset() is None:
        raise ConfigError(f"run_at must be a timezone-aware datetime, got {run_at!r}")


def _check_unique(key: str | None, window: timedelta | float | None) -> None:
    """The unique options' rules (unique.check_unique) as a ConfigError, before any insert."""
    try:
        check_unique(key, as_timedelta(window))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def as_timedelta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


@dataclass(slots=True)
class ActorPlan:
    """What the jobs of one actor share within a batch, resolved once per distinct actor."""

    name: str
    ref: ActorRef | None
    queue: str
    retry: RetryPolicy
    priority: int
    result_ttl: timedelta | None
    deadline: timedelta | None = field(init=False)

    def __post_init__(self) -> None:
        # An indefinite policy's time budget is the default schedule_to_close deadline.
        budget = self.retry.time_budget if self.retry.kind == "indefinite" else None
        self.deadline = budget

    def dump(self, payload: Any) -> dict[str, Any]:
        """One payload as stored: validated by the actor's model when the actor is known."""
        if self.ref is not None:
            return self.ref.dump_payload(payload)
        if isinstance(payload, dict):
            return payload
        if payload is None:
            return {}
        if isinstance(payload, BaseModel):
            dumped: dict[str, Any] = payload.model_dump(mode="json")
            return dumped
        raise ConfigError(f"payload for {self.name} must be a JSON object")


def parse_item(raw: Any) -> tuple[EnqueueItem | None, ActorRef | str]:
    """(the item, or None for an ``(actor, payload)`` tuple; its actor)."""
    if isinstance(raw, EnqueueItem):
        return raw, raw.actor
    if isinstance(raw, tuple) and len(raw) == 2:
        return None, raw[0]
    raise TypeError("enqueue_batch items are EnqueueItem or (actor, payload) tuples")


class PreparedBatch(Sequence[EnqueueArgs]):
    """A batch's EnqueueArgs, each built (its payload validated) when it is read.

    The Postgres backend reads a bulk enqueue a slice at a time while the server inserts the
    slice before, so the client's per-item work overlaps the server's too. An invalid item
    raises when read; the backend then rolls the whole batch back. ``trace`` holds the
    batch's producer span ids once it is open; ``batch_tag``, when set, is the batch id
    every item's metadata carries (it wins over an item's own ``batch_id``).
    """

    def __init__(
        self,
        items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]],
        plans: list[ActorPlan],
        counts: dict[str, int],
    ) -> None:
        self._items = items
        self._plans = plans
        self.counts = counts
        self.trace: tuple[str | None, str | None] = (None, None)
        self.batch_tag: str | None = None

    def __len__(self) -> int:
        return len(self._items)

    def destinations(self) -> Iterator[tuple[str, str]]:
        """Each item's (queue, actor), without building it (the enqueue count's tally)."""
        for raw, plan in zip(self._items, self._plans, strict=True):
            item, _ = parse_item(raw)
            queue = plan.queue if item is None or item.queue is None else item.queue
            yield queue, plan.name

    @property
    def actor(self) -> str:
        return self._plans[0].name

    @property
    def queue(self) -> str:
        item, _ = parse_item(self._items[0])
        if item is not None and item.queue is not None:
            return item.queue
        return self._plans[0].queue

    @overload
    def __getitem__(self, index: int) -> EnqueueArgs: ...

    @overload
    def __getitem__(self, index: slice) -> list[EnqueueArgs]: ...

    def __getitem__(self, index: int | slice) -> EnqueueArgs | list[EnqueueArgs]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(len(self._items)))]
        return self._build(range(len(self._items))[index])

    def __iter__(self) -> Iterator[EnqueueArgs]:
        build = self._build
        for index in range(len(self._items)):
            yield build(index)

    def _build(self, index: int) -> EnqueueArgs:
        raw, plan = self._items[index], self._plans[index]
        item, _ = parse_item(raw)
        trace_id, span_id = self.trace
        tag = self.batch_tag
        if item is None:  # the bulk path: every field but the payload is the actor's
            return from_values(
                EnqueueArgs,
                (
                    plan.name,  # actor (fields in EnqueueArgs order)
                    plan.dump(raw[1]),  # type: ignore[index]  # an (actor, payload) tuple
                    plan.queue,
                    plan.priority,
                    None,  # delay
                    None,  # identity_key
                    None,  # fairness_key
                    plan.deadline,  # schedule_to_close
                    plan.retry.kind,
                    plan.retry.max_attempts,
                    plan.result_ttl,
                    {} if tag is None else {BATCH_ID_KEY: tag},  # metadata
                    trace_id,
                    span_id,
                    None,  # job_id
                    None,  # unique_key
                    None,  # unique_for
                    None,  # run_at
                    False,  # waiting
                ),
            )
        deadline = as_timedelta(item.schedule_to_close)
        metadata = dict(item.metadata or {})
        if tag is not None:
            metadata[BATCH_ID_KEY] = tag
        return EnqueueArgs(
            actor=plan.name,
            payload=plan.dump(item.payload),
            queue=plan.queue if item.queue is None else check_name(item.queue, "queue"),
            priority=plan.priority if item.priority is None else item.priority,
            delay=as_timedelta(item.delay),
            identity_key=item.identity_key,
            fairness_key=item.fairness_key,
            schedule_to_close=plan.deadline if deadline is None else deadline,
            retry_kind=plan.retry.kind,
            max_attempts=plan.retry.max_attempts,
            result_ttl=plan.result_ttl,
            metadata=metadata,
            trace_id=trace_id,
            span_id=span_id,
            unique_key=item.unique_key,
            unique_for=as_timedelta(item.unique_for),
            run_at=item.run_at,
        )


def unknown_actor(name: str, known: Iterable[str]) -> str:
    """What to say of actor ``name`` that no worker has registered, with the closest of the
    ``known`` names (a typo is the usual cause)."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return f"no worker has registered actor {name!r}{hint}"


class EnqueuePlanner:
    """One client's preparation of enqueues: each distinct actor resolved once per batch (a
    by-name actor's stored row re-read at most every ``capacity_ttl`` seconds), and the
    max_pending check. ``backend`` returns the client's open backend (or raises); the
    capacity cache is set when the client opens."""

    # Plain field assignments, alike the constructors of FallbackLimiterStore
    # (ratelimit/fallback.py), HookPipe and ParentWatch by shape only: other data.
    def __init__(
        self,
        backend: Callable[[], Backend],
        registry: dict[str, ActorRef],
        capacity_ttl: float,
        *,
        strict_actors: bool = False,
    ) -> None:
        self._backend = backend
        self.registry = registry
        self.capacity_ttl = capacity_ttl
        self.strict_actors = strict_actors
        self.capacity: CapacityCache | None = None
        # A by-name actor's stored row (None: not registered), and when it was read.
        self._stored: dict[str, tuple[float, ActorConfigRow | None]] = {}

    async def prepare(
        self, items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]]
    ) -> PreparedBatch:
        """Resolve what the batch's actors share; the items themselves are built when read.

        Everything that may await happens here, once per distinct actor (a by-name actor's
        stored row); building an item (payload validation, its EnqueueArgs) awaits nothing.
        """
        plans: dict[str | int, ActorPlan] = {}
        item_plans: list[ActorPlan] = []
        counts: dict[str, int] = {}
        for raw in items:
            _, actor = parse_item(raw)
            # Refs key by identity: an ActorRef holds dicts, so it is not hashable.
            key = actor if isinstance(actor, str) else id(actor)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = await self.plan(actor)  # once per distinct actor
            item_plans.append(plan)
            counts[plan.name] = counts.get(plan.name, 0) + 1
        return PreparedBatch(items, item_plans, counts)

    async def plan(self, actor: ActorRef | str) -> ActorPlan:
        """What every job of ``actor`` shares: its ref (if known), queue, retry policy.

        An actor this process does not know takes what its workers stored: their queue,
        retry policy and priority (the defaults while no worker has registered it).
        """
        ref = actor if isinstance(actor, ActorRef) else self.registry.get(actor)
        name = actor.name if isinstance(actor, ActorRef) else actor
        if not name:
            raise ConfigError("actor name must not be empty")
        where = f"actor {name!r}'s queue"
        if ref is not None:
            queue = check_name(ref.queue, "queue", field=where)
            return ActorPlan(name, ref, queue, ref.retry, ref.priority, ref.result_ttl)
        row = await self._stored_config(name)
        if row is None:
            if self.strict_actors:
                known = [config.actor for config in await self._backend().list_actor_configs()]
                raise UnknownActorError(unknown_actor(name, [*known, *self.registry]))
            return ActorPlan(name, None, DEFAULT_QUEUE, DEFAULT_RETRY_POLICY, 0, None)
        retry = stored_retry(row) or DEFAULT_RETRY_POLICY
        queue = check_name(row.queue, "queue", field=where)
        # result_ttl stays None: the stored one applies when the job ends, whoever enqueued.
        return ActorPlan(name, None, queue, retry, row.priority or 0, None)

    async def _stored_config(self, actor: str) -> ActorConfigRow | None:
        """The actor's stored row, read at most once per ``capacity_ttl`` seconds, so a
        long-lived client follows a deploy that registers or changes the actor."""
        now = time.monotonic()
        cached = self._stored.get(actor)
        if cached is not None and now - cached[0] < self.capacity_ttl:
            return cached[1]
        row = await self._backend().get_actor_config(actor)
        self._stored[actor] = (now, row)
        return row

    async def check_capacity(self, wanted: dict[str, int], *, kind: str = "batch") -> None:
        """Refuse the enqueue when an actor's pending jobs plus ``wanted`` pass max_pending
        (``kind``: the enqueue refused, ``single``, ``batch`` or ``copy``, as counted)."""
        if self.capacity is None:
            raise RuntimeError(NOT_OPEN)
        limits: dict[str, int] = {}
        for actor_name in wanted:
            ref = self.registry.get(actor_name)
            declared = ref.max_pending if ref else None
            limit = await self.capacity.max_pending(actor_name, declared)
            if limit is not None:
                limits[actor_name] = limit
        if not limits:
            return
        pending = await self._backend().count_pending_jobs(list(limits))
        for actor_name, limit in limits.items():
            if pending.get(actor_name, 0) + wanted[actor_name] > limit:
                refused = {"taskq.actor": actor_name, "taskq.enqueue.kind": kind}
                instruments().backpressure_errors.add(1, labels(**refused))
                raise MaxPendingExceededError(
                    f"{actor_name} has {pending.get(actor_name, 0)} pending job(s); "
                    f"max_pending is {limit}"
                )
