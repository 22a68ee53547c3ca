"""JobsClient: how applications enqueue and inspect jobs.

Enqueue by ActorRef (the payload is validated by the actor's model before any insert) or by
name with a plain dict (no registry needed). ``connection=`` enqueues inside the caller's own
transaction. ``max_pending`` back-pressure raises MaxPendingExceededError. A single enqueue
outlives a database restart: it is retried through transient errors for a bounded time, under
an id fixed before the first attempt, so a lost answer never makes the job twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import TracebackType
from typing import Any, overload
from uuid import UUID

from pydantic import BaseModel

from taskq_core.actor_config import stored_retry
from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import (
    ActorConfigRow,
    Backend,
    CancelOutcome,
    EnqueueArgs,
    JobFilter,
    JobRow,
    from_values,
)
from taskq_core.backend.protocol.batches import BATCH_ID_KEY
from taskq_core.backend.protocol.unique import check_unique
from taskq_core.batches import AbortBatchAfter
from taskq_core.capacity import CapacityCache
from taskq_core.client_batches import BatchMethods
from taskq_core.client_progress import ProgressMethods
from taskq_core.client_reclaims import ReclaimMethods
from taskq_core.client_schedules import ScheduleMethods
from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.enqueue_retry import TransientRetry
from taskq_core.errors import ConfigError, JobNotFoundError, MaxPendingExceededError
from taskq_core.ids import uuid7
from taskq_core.names import check_name
from taskq_core.obs.metrics import count_sent, instruments, labels
from taskq_core.obs.spans import producer_span
from taskq_core.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from taskq_core.settings import TaskqSettings

_NOT_OPEN = "JobsClient is not open: use 'async with JobsClient(...)' or await open()"
# How long a single enqueue retries through database trouble: a restart or a failover's
# switch-over takes seconds to tens of seconds.
DEFAULT_ENQUEUE_RETRY_TIMEOUT = timedelta(seconds=30)


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

    def __post_init__(self) -> None:
        _check_unique(self.unique_key, self.unique_for)


def _check_unique(key: str | None, window: timedelta | float | None) -> None:
    """The unique options' rules (unique.check_unique) as a ConfigError, before any insert."""
    try:
        check_unique(key, _delta(window))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _delta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


@dataclass(slots=True)
class _ActorPlan:
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


def _parse(raw: Any) -> tuple[EnqueueItem | None, ActorRef | str]:
    """(the item, or None for an ``(actor, payload)`` tuple; its actor)."""
    if isinstance(raw, EnqueueItem):
        return raw, raw.actor
    if isinstance(raw, tuple) and len(raw) == 2:
        return None, raw[0]
    raise TypeError("enqueue_batch items are EnqueueItem or (actor, payload) tuples")


class _Batch(Sequence[EnqueueArgs]):
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
        plans: list[_ActorPlan],
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
            item, _ = _parse(raw)
            queue = plan.queue if item is None or item.queue is None else item.queue
            yield queue, plan.name

    @property
    def actor(self) -> str:
        return self._plans[0].name

    @property
    def queue(self) -> str:
        item, _ = _parse(self._items[0])
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
        item, _ = _parse(raw)
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
                ),
            )
        deadline = _delta(item.schedule_to_close)
        metadata = dict(item.metadata or {})
        if tag is not None:
            metadata[BATCH_ID_KEY] = tag
        return EnqueueArgs(
            actor=plan.name,
            payload=plan.dump(item.payload),
            queue=plan.queue if item.queue is None else check_name(item.queue, "queue"),
            priority=plan.priority if item.priority is None else item.priority,
            delay=_delta(item.delay),
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
            unique_for=_delta(item.unique_for),
        )


class JobsClient(BatchMethods, ScheduleMethods, ReclaimMethods, ProgressMethods):
    """Enqueue, inspect, cancel and retry jobs. Use as ``async with JobsClient(dsn) as client``.

    ``dsn=None`` reads TASKQ_PG_DSN (and .env); ``backend=`` injects any Backend (tests use the
    in-memory one). ``registry`` lets by-name enqueues validate payloads and use actor options;
    a by-name actor outside it takes the queue, retry policy and priority its workers stored.
    Stored actor settings are re-read at most every ``capacity_ttl`` seconds.
    ``enqueue_retry_timeout`` (seconds or a timedelta, default 30 s, 0 turns it off) bounds how
    long ``enqueue`` retries while the database is away or asks for a retry; an enqueue into
    the caller's transaction (``connection=``) is never retried: the transaction is theirs.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        backend: Backend | None = None,
        registry: Iterable[ActorRef] | None = None,
        capacity_ttl: float = 5.0,
        enqueue_retry_timeout: timedelta | float = DEFAULT_ENQUEUE_RETRY_TIMEOUT,
    ) -> None:
        retry_for = _delta(enqueue_retry_timeout)
        if retry_for is None or retry_for < timedelta(0):
            raise ConfigError("enqueue_retry_timeout must be zero or more seconds")
        self._enqueue_retry_timeout = retry_for.total_seconds()
        self._dsn = dsn
        self._schema = schema
        self._backend = backend
        self._owns_backend = backend is None
        self._registry = {ref.name: ref for ref in registry or ()}
        self._capacity_ttl = capacity_ttl
        self._capacity: CapacityCache | None = None
        # A by-name actor's stored row (None: not registered), and when it was read.
        self._stored: dict[str, tuple[float, ActorConfigRow | None]] = {}

    async def __aenter__(self) -> JobsClient:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect (when no backend was injected); idempotent."""
        if self._backend is None:
            from taskq_core.backend.factory import Role, open_backend

            settings = TaskqSettings.load(pg_dsn=self._dsn, schema_name=self._schema)
            self._backend = await open_backend(settings, Role.CLIENT)
        if self._capacity is None:
            self._capacity = CapacityCache(
                self._backend, ttl=self._capacity_ttl, monotonic=time.monotonic
            )

    async def close(self) -> None:
        """Close the backend this client opened itself."""
        if self._owns_backend and self._backend is not None:
            await self._backend.close()
            self._backend = None

    @property
    def backend(self) -> Backend:
        """The backend in use (after ``open``)."""
        if self._backend is None:
            raise RuntimeError(_NOT_OPEN)
        return self._backend

    # --- enqueue -----------------------------------------------------------------------------
    async def enqueue(
        self,
        actor: ActorRef | str,
        payload: BaseModel | dict[str, Any] | None = None,
        *,
        delay: timedelta | float | None = None,
        queue: str | None = None,
        priority: int | None = None,
        identity_key: str | None = None,
        fairness_key: str | None = None,
        schedule_to_close: timedelta | float | None = None,
        metadata: dict[str, Any] | None = None,
        connection: Any = None,
        unique_key: str | None = None,
        unique_for: timedelta | float | None = None,
    ) -> JobRow:
        """Insert one job; returns its row. Raises PayloadValidationError before any insert,
        and PayloadTooLargeError when the payload's JSON is over TASKQ_MAX_PAYLOAD_BYTES (the
        backend's limit; every enqueue method, finalizers and schedules alike).

        ``unique_key``: no second job with that key while this one waits or runs; with
        ``unique_for`` (seconds or a timedelta): at most one job with that key per window of
        that length (windows aligned on the Unix epoch, on the database's clock), whatever
        its state. A duplicate raises SingletonCollisionError (``existing_job_id``,
        ``retry_after``) and inserts nothing.

        Without ``connection``, database trouble (``TRANSIENT_ERRORS``) is retried for up to
        ``enqueue_retry_timeout``; then the last error is raised.
        """
        item = EnqueueItem(
            actor, payload, delay, queue, priority, identity_key, fairness_key,
            schedule_to_close, metadata, unique_key, unique_for,
        )  # fmt: skip
        # The caller's transaction is not ours to repeat: one attempt, whatever fails.
        retry = TransientRetry(0.0 if connection is not None else self._enqueue_retry_timeout)
        args = await retry.run(lambda: self._admit(item), what="enqueue_prepare")
        with producer_span(args.queue, args.actor) as (trace_id, span_id):
            # The id is fixed before the first attempt: an attempt that committed but whose
            # answer was lost is found by the next one (enqueue is idempotent on the id).
            args = replace(args, trace_id=trace_id, span_id=span_id, job_id=uuid7())
            row = await retry.run(
                lambda: self.backend.enqueue(args, connection=connection), what="enqueue"
            )
        count_sent(((row.queue, row.actor),))
        return row

    async def _admit(self, item: EnqueueItem) -> EnqueueArgs:
        """One item's EnqueueArgs, validated, once its actor has room (max_pending)."""
        batch = await self._prepare([item])
        args = batch[0]  # validated before the capacity check and any insert
        await self._check_capacity(batch.counts, kind="single")
        return args

    async def enqueue_batch(
        self,
        items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]],
        *,
        failure_policy: AbortBatchAfter | None = None,
        finalizer: EnqueueItem | tuple[ActorRef | str, Any] | None = None,
        batch_id: UUID | str | None = None,
        connection: Any = None,
    ) -> list[JobRow]:
        """Insert every item in one transaction; one row per item, in order.

        An invalid item raises (PayloadValidationError, ...) and nothing of the batch is stored.

        With any of ``failure_policy``, ``finalizer`` or ``batch_id`` the items form a batch:
        each carries ``metadata["batch_id"]`` (``batch_id``, else a new time-ordered UUID), which
        ``wait_for_batch`` and ``taskq batches`` follow. A policy or a finalizer also makes
        the batch's row, in the same transaction as its children (the caller's
        ``connection`` when given): ``AbortBatchAfter(n)`` cancels the pending and scheduled
        children once n children in a row failed; the finalizer job is enqueued once, when
        every child is terminal or the batch aborted, with ``metadata["finalizes_batch"]``
        naming the batch. Both are checked (the finalizer's payload too) before any insert.
        """
        if failure_policy is not None or finalizer is not None or batch_id is not None:
            return await self._enqueue_tracked_batch(
                items,
                failure_policy=failure_policy,
                finalizer=finalizer,
                batch_id=batch_id,
                connection=connection,
            )
        batch = await self._prepare(items)
        await self._check_capacity(batch.counts)
        if not batch:
            return []
        with producer_span(batch.queue, batch.actor) as batch.trace:
            rows = await self.backend.enqueue_batch(batch, connection=connection)
        count_sent((row.queue, row.actor) for row in rows)
        return rows

    async def enqueue_many_fast(
        self,
        items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]],
        *,
        connection: Any = None,
    ) -> int:
        """Bulk insert through the COPY path; returns how many jobs were inserted."""
        batch = await self._prepare(items)
        await self._check_capacity(batch.counts, kind="copy")
        if not batch:
            return 0
        with producer_span(batch.queue, batch.actor) as batch.trace:
            count = await self.backend.enqueue_batch_fast(batch, connection=connection)
        count_sent(batch.destinations())
        return count

    async def _prepare(self, items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]]) -> _Batch:
        """Resolve what the batch's actors share; the items themselves are built when read.

        Everything that may await happens here, once per distinct actor (a by-name actor's
        stored row); building an item (payload validation, its EnqueueArgs) awaits nothing.
        """
        plans: dict[str | int, _ActorPlan] = {}
        item_plans: list[_ActorPlan] = []
        counts: dict[str, int] = {}
        for raw in items:
            _, actor = _parse(raw)
            # Refs key by identity: an ActorRef holds dicts, so it is not hashable.
            key = actor if isinstance(actor, str) else id(actor)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = await self._plan(actor)  # once per distinct actor
            item_plans.append(plan)
            counts[plan.name] = counts.get(plan.name, 0) + 1
        return _Batch(items, item_plans, counts)

    async def _plan(self, actor: ActorRef | str) -> _ActorPlan:
        """What every job of ``actor`` shares: its ref (if known), queue, retry policy.

        An actor this process does not know takes what its workers stored: their queue,
        retry policy and priority (the defaults while no worker has registered it).
        """
        ref = actor if isinstance(actor, ActorRef) else self._registry.get(actor)
        name = actor.name if isinstance(actor, ActorRef) else actor
        if not name:
            raise ConfigError("actor name must not be empty")
        where = f"actor {name!r}'s queue"
        if ref is not None:
            queue = check_name(ref.queue, "queue", field=where)
            return _ActorPlan(name, ref, queue, ref.retry, ref.priority, ref.result_ttl)
        row = await self._stored_config(name)
        if row is None:
            return _ActorPlan(name, None, DEFAULT_QUEUE, DEFAULT_RETRY_POLICY, 0, None)
        retry = stored_retry(row) or DEFAULT_RETRY_POLICY
        queue = check_name(row.queue, "queue", field=where)
        # result_ttl stays None: the stored one applies when the job ends, whoever enqueued.
        return _ActorPlan(name, None, queue, retry, row.priority or 0, None)

    async def _stored_config(self, actor: str) -> ActorConfigRow | None:
        """The actor's stored row, read at most once per ``capacity_ttl`` seconds, so a
        long-lived client follows a deploy that registers or changes the actor."""
        now = time.monotonic()
        cached = self._stored.get(actor)
        if cached is not None and now - cached[0] < self._capacity_ttl:
            return cached[1]
        row = await self.backend.get_actor_config(actor)
        self._stored[actor] = (now, row)
        return row

    async def _check_capacity(self, wanted: dict[str, int], *, kind: str = "batch") -> None:
        """Refuse the enqueue when an actor's pending jobs plus ``wanted`` pass max_pending
        (``kind``: the enqueue refused, ``single``, ``batch`` or ``copy``, as counted)."""
        if self._capacity is None:
            raise RuntimeError(_NOT_OPEN)
        limits: dict[str, int] = {}
        for actor_name in wanted:
            ref = self._registry.get(actor_name)
            declared = ref.max_pending if ref else None
            limit = await self._capacity.max_pending(actor_name, declared)
            if limit is not None:
                limits[actor_name] = limit
        if not limits:
            return
        pending = await self.backend.count_pending_jobs(list(limits))
        for actor_name, limit in limits.items():
            if pending.get(actor_name, 0) + wanted[actor_name] > limit:
                refused = {"taskq.actor": actor_name, "taskq.enqueue.kind": kind}
                instruments().backpressure_errors.add(1, labels(**refused))
                raise MaxPendingExceededError(
                    f"{actor_name} has {pending.get(actor_name, 0)} pending job(s); "
                    f"max_pending is {limit}"
                )

    def register(self, *refs: ActorRef) -> None:
        """Make actors known for by-name enqueues (payload validation, queue, retry policy)."""
        for ref in refs:
            self._registry[ref.name] = ref

    # --- inspect and control -----------------------------------------------------------------
    async def get(self, job_id: UUID | str) -> JobRow | None:
        """One job, or None."""
        return await self.backend.get(_uuid(job_id))

    async def list(self, filter: JobFilter | None = None, **criteria: Any) -> list[JobRow]:
        """Jobs matching a JobFilter (or its fields as keywords), newest first."""
        return await self.backend.list_jobs(filter or JobFilter(**criteria))

    async def cancel(self, job_id: UUID | str, *, reason: str | None = None) -> CancelOutcome:
        """Cancel a job: at once when waiting, cooperatively when running."""
        instruments().cancellation_requested.add(1)
        outcome = await self.backend.write_cancel_request(_uuid(job_id), reason)
        if outcome == "not_found":
            raise JobNotFoundError(f"no job with id {job_id}")
        return outcome

    async def retry(self, job_id: UUID | str) -> bool:
        """Re-pend a failed, crashed or cancelled job; False when it is in another state."""
        job = await self.get(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return await self.backend.retry_job(job.id)

    async def wait(
        self, job_id: UUID | str, *, timeout: float | None = None, poll_interval: float = 0.05
    ) -> JobRow:
        """Wait until the job is terminal and return that row (TimeoutError after ``timeout``)."""
        ident = _uuid(job_id)
        interval = poll_interval
        async with asyncio.timeout(timeout):
            while True:
                job = await self.backend.get(ident)
                if job is None:
                    raise JobNotFoundError(f"no job with id {job_id}")
                if job.is_terminal:
                    return job
                await asyncio.sleep(interval)
                interval = min(interval * 1.5, 1.0)


def _uuid(value: UUID | str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise JobNotFoundError(f"{value!r} is not a job id (expected a UUID)") from None
