"""JobsClient: how applications enqueue and inspect jobs.

Enqueue by ActorRef (the payload is validated by the actor's model before any insert) or by
name with a plain dict (no registry needed). ``connection=`` enqueues inside the caller's own
transaction. ``max_pending`` back-pressure raises MaxPendingExceededError. A single enqueue
outlives a database restart: it is retried through transient errors for a bounded time, under
an id fixed before the first attempt, so a lost answer never makes the job twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import (
    Backend,
    CancelOutcome,
    EnqueueArgs,
    JobFilter,
    JobRow,
)
from taskq_core.batches import AbortBatchAfter
from taskq_core.capacity import CapacityCache
from taskq_core.client_batches import BatchMethods
from taskq_core.client_progress import ProgressMethods
from taskq_core.client_reclaims import ReclaimMethods
from taskq_core.client_workflows import WorkflowMethods
from taskq_core.cron_schedules import ScheduleMethods
from taskq_core.enqueue_conflict import OnConflict, enqueue_resolving
from taskq_core.enqueue_plan import NOT_OPEN, EnqueuePlanner, as_timedelta
from taskq_core.enqueue_plan import EnqueueItem as EnqueueItem  # importable from here too
from taskq_core.enqueue_retry import TransientRetry
from taskq_core.errors import ConfigError, JobNotFoundError
from taskq_core.ids import parse_uuid, uuid7
from taskq_core.obs.metrics import count_sent, instruments
from taskq_core.obs.spans import producer_span
from taskq_core.polling import poll_until
from taskq_core.settings import TaskqSettings

# How long a single enqueue retries through database trouble: a restart or a failover's
# switch-over takes seconds to tens of seconds.
DEFAULT_ENQUEUE_RETRY_TIMEOUT = timedelta(seconds=30)


class JobsClient(BatchMethods, WorkflowMethods, ScheduleMethods, ReclaimMethods, ProgressMethods):
    """Enqueue, inspect, cancel and retry jobs. Use as ``async with JobsClient(dsn) as client``.

    ``dsn=None`` reads TASKQ_PG_DSN (and .env); ``backend=`` injects any Backend (tests use the
    in-memory one). ``registry`` lets by-name enqueues validate payloads and use actor options;
    a by-name actor outside it takes the queue, retry policy and priority its workers stored.
    Stored actor settings are re-read at most every ``capacity_ttl`` seconds.
    ``enqueue_retry_timeout`` (seconds or a timedelta, default 30 s, 0 turns it off) bounds how
    long ``enqueue`` retries while the database is away or asks for a retry; an enqueue into
    the caller's transaction (``connection=``) is never retried: the transaction is theirs.
    ``strict_actors=True`` refuses a by-name enqueue for an actor no worker has registered
    (UnknownActorError, naming the closest registered names) instead of letting it wait.
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
        strict_actors: bool = False,
    ) -> None:
        retry_for = as_timedelta(enqueue_retry_timeout)
        if retry_for is None or retry_for < timedelta(0):
            raise ConfigError("enqueue_retry_timeout must be zero or more seconds")
        self._enqueue_retry_timeout = retry_for.total_seconds()
        self._dsn = dsn
        self._schema = schema
        self._backend = backend
        self._owns_backend = backend is None
        self._registry = {ref.name: ref for ref in registry or ()}
        # Shares the registry: ``register`` adds to it.
        self._planner = EnqueuePlanner(
            lambda: self.backend, self._registry, capacity_ttl, strict_actors=strict_actors
        )

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
        planner = self._planner
        if planner.capacity is None:
            planner.capacity = CapacityCache(
                self._backend, ttl=planner.capacity_ttl, monotonic=time.monotonic
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
            raise RuntimeError(NOT_OPEN)
        return self._backend

    @property
    def planner(self) -> EnqueuePlanner:
        """How this client prepares its enqueues (shared with its batch and schedule
        methods)."""
        return self._planner

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
        run_at: datetime | None = None,
        on_conflict: OnConflict = "raise",
    ) -> JobRow:
        """Insert one job; returns its row. Raises PayloadValidationError before any insert,
        and PayloadTooLargeError when the payload's JSON is over TASKQ_MAX_PAYLOAD_BYTES (the
        backend's limit; every enqueue method, finalizers and schedules alike).

        ``delay`` (seconds or a timedelta) or ``run_at`` (a timezone-aware datetime;
        ConfigError when naive or given with ``delay``) makes it wait until then, on the
        database's clock; a ``run_at`` already past is due at once.

        ``unique_key``: no second job with that key while this one waits or runs; with
        ``unique_for`` (seconds or a timedelta): at most one job with that key per window of
        that length (windows aligned on the Unix epoch, on the database's clock), whatever
        its state. A duplicate raises SingletonCollisionError (``existing_job_id``,
        ``retry_after``) and inserts nothing, unless ``on_conflict`` says otherwise:
        ``"return_existing"`` returns the holder's row, ``"replace"`` gives a holder still
        waiting this payload and start time (debounce) and returns it; a running holder still
        raises.

        Without ``connection``, database trouble (``TRANSIENT_ERRORS``) is retried for up to
        ``enqueue_retry_timeout``; then the last error is raised.
        """
        item = EnqueueItem(
            actor, payload, delay, queue, priority, identity_key, fairness_key,
            schedule_to_close, metadata, unique_key, unique_for, run_at, on_conflict,
        )  # fmt: skip
        # The caller's transaction is not ours to repeat: one attempt, whatever fails.
        retry = TransientRetry(0.0 if connection is not None else self._enqueue_retry_timeout)
        args = await retry.run(lambda: self._admit(item), what="enqueue_prepare")
        with producer_span(args.queue, args.actor) as (trace_id, span_id):
            # The id is fixed before the first attempt: an attempt that committed but whose
            # answer was lost is found by the next one (enqueue is idempotent on the id).
            args = replace(args, trace_id=trace_id, span_id=span_id, job_id=uuid7())
            backend = self.backend
            if on_conflict == "raise":  # the usual enqueue: one statement, nothing else
                row = await retry.run(
                    lambda: backend.enqueue(args, connection=connection), what="enqueue"
                )
            else:
                row = await retry.run(
                    lambda: enqueue_resolving(backend, args, on_conflict, connection),
                    what="enqueue",
                )
        count_sent(((row.queue, row.actor),))
        return row

    async def _admit(self, item: EnqueueItem) -> EnqueueArgs:
        """One item's EnqueueArgs, validated, once its actor has room (max_pending)."""
        batch = await self.planner.prepare([item])
        args = batch[0]  # validated before the capacity check and any insert
        await self.planner.check_capacity(batch.counts, kind="single")
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
        modes: list[OnConflict] = [
            item.on_conflict if isinstance(item, EnqueueItem) else "raise" for item in items
        ]
        resolving = any(mode != "raise" for mode in modes)
        if failure_policy is not None or finalizer is not None or batch_id is not None:
            if resolving:
                raise ConfigError("a tracked batch's children take on_conflict='raise' only")
            return await self._enqueue_tracked_batch(
                items,
                failure_policy=failure_policy,
                finalizer=finalizer,
                batch_id=batch_id,
                connection=connection,
            )
        batch = await self.planner.prepare(items)
        await self.planner.check_capacity(batch.counts)
        if not batch:
            return []
        with producer_span(batch.queue, batch.actor) as batch.trace:
            if resolving:
                rows = await self._enqueue_resolving(list(batch), modes, connection)
            else:
                rows = await self.backend.enqueue_batch(batch, connection=connection)
        count_sent((row.queue, row.actor) for row in rows)
        return rows

    async def _enqueue_resolving(
        self, batch: list[EnqueueArgs], modes: list[OnConflict], connection: Any
    ) -> list[JobRow]:
        """A batch some of whose items resolve a unique-key conflict (``on_conflict``): in one
        transaction (the caller's, when given), the plain items in one bulk insert, each
        resolving item on its own; one row per item, in order."""
        backend = self.backend
        async with AsyncExitStack() as stack:
            tx = connection
            if tx is None:
                tx = await stack.enter_async_context(backend.transaction())
            plain = [args for args, mode in zip(batch, modes, strict=True) if mode == "raise"]
            inserted = iter(await backend.enqueue_batch(plain, connection=tx) if plain else [])
            return [
                next(inserted)
                if mode == "raise"
                else await enqueue_resolving(backend, args, mode, tx)
                for args, mode in zip(batch, modes, strict=True)
            ]

    async def enqueue_many_fast(
        self,
        items: Sequence[EnqueueItem | tuple[ActorRef | str, Any]],
        *,
        connection: Any = None,
    ) -> int:
        """Bulk insert through the COPY path; returns how many jobs were inserted."""
        batch = await self.planner.prepare(items)
        await self.planner.check_capacity(batch.counts, kind="copy")
        if not batch:
            return 0
        with producer_span(batch.queue, batch.actor) as batch.trace:
            count = await self.backend.enqueue_batch_fast(batch, connection=connection)
        count_sent(batch.destinations())
        return count

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
        # Alike client_workflows.py's wait_workflow by shape only: each polls its own row through
        # poll_until, with its own end test.
        ident = _uuid(job_id)
        return await poll_until(
            lambda: self.backend.get(ident),
            lambda job: job.is_terminal,
            missing=f"no job with id {job_id}",
            timeout=timeout,
            poll_interval=poll_interval,
        )


def _uuid(value: UUID | str) -> UUID:
    ident = parse_uuid(value)
    if ident is None:
        raise JobNotFoundError(f"{value!r} is not a job id (expected a UUID)")
    return ident
