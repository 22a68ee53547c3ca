"""JobsClient's batch methods: a tracked batch's enqueue (also streamed), its row, the wait.

A batch's children carry ``metadata.batch_id``; a ``batches`` row exists only when the caller
gave a failure policy or a finalizer, and it is inserted in the same transaction as the
children, so a batch is either stored whole or not at all. Everything that can be refused
(the policy, the id, the finalizer and its payload) is checked before the first insert; a
bad child is refused while the backend reads it, which rolls the transaction back.
``wait_for_batch`` reads the children's counts and the row, and decides with
``batches.decide_wait``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, EnqueueArgs, JobRow
from taskq_core.backend.protocol.batches import (
    BATCH_ID_KEY,
    FINALIZES_KEY,
    BatchRow,
    NewBatch,
)
from taskq_core.batches import (
    AbortBatchAfter,
    BatchCompletionStatus,
    BatchEnqueued,
    OnEmpty,
    WaitDecision,
    decide_wait,
)
from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.errors import BatchAbortedError, ConfigError, EmptyBatchError
from taskq_core.ids import parse_uuid, uuid7
from taskq_core.obs.metrics import count_sent
from taskq_core.obs.spans import producer_span
from taskq_core.retry import Snooze

if TYPE_CHECKING:
    from typing import TypeAlias

    from taskq_core.enqueue_plan import EnqueueItem, EnqueuePlanner

    # What a batch's items (and its finalizer) may be, as enqueue_batch takes them.
    Item: TypeAlias = EnqueueItem | tuple[ActorRef | str, Any]

MAX_CHUNK = 1000
DEFAULT_WAIT_POLL = 0.1


# Each client_* mixin states what it needs of JobsClient, so none imports another; this one
# repeats client_workflows.py's on purpose (protocol/history.py's SucceededJob is alike by
# shape only).
class _Client(Protocol):
    """The parts of JobsClient these methods use."""

    @property
    def backend(self) -> Backend: ...

    @property
    def planner(self) -> EnqueuePlanner: ...


@dataclass(frozen=True)
class _BatchPlan:
    """A batch checked before any insert: its id, and what its row holds (no row when
    neither a threshold nor a finalizer was given)."""

    id: UUID
    threshold: int | None
    finalizer: EnqueueArgs | None

    @property
    def tracked(self) -> bool:
        """Whether the batch gets a row."""
        return self.threshold is not None or self.finalizer is not None

    def new_batch(self, queue: str | None, size: int) -> NewBatch:
        """The row to insert; an empty batch takes its finalizer's queue."""
        if queue is None:
            queue = self.finalizer.queue if self.finalizer is not None else DEFAULT_QUEUE
        return NewBatch(
            id=self.id,
            queue=queue,
            expected_size=size,
            failure_threshold=self.threshold,
            finalizer=self.finalizer,
        )


def _batch_uuid(value: UUID | str) -> UUID:
    ident = parse_uuid(value)
    if ident is None:
        raise ConfigError(f"batch_id: {value!r} is not a UUID")
    return ident


async def _plan_batch(
    client: _Client,
    failure_policy: AbortBatchAfter | None,
    finalizer: Item | None,
    batch_id: UUID | str | None,
) -> _BatchPlan:
    """Check the policy, the id and the finalizer (its payload validated as any item's)."""
    if failure_policy is not None and not isinstance(failure_policy, AbortBatchAfter):
        raise ConfigError(
            f"failure_policy must be AbortBatchAfter(n), got {type(failure_policy).__name__}"
        )
    ident = uuid7() if batch_id is None else _batch_uuid(batch_id)
    threshold = None if failure_policy is None else failure_policy.consecutive_failures
    final: EnqueueArgs | None = None
    if finalizer is not None:
        final = (await client.planner.prepare([finalizer]))[0]
        metadata = {k: v for k, v in final.metadata.items() if k != BATCH_ID_KEY}
        metadata[FINALIZES_KEY] = str(ident)  # the finalizer is not one of the children
        final = replace(final, metadata=metadata, job_id=uuid7())
    return _BatchPlan(ident, threshold, final)


@asynccontextmanager
async def _transaction(backend: Backend, connection: Any) -> AsyncIterator[Any]:
    """The caller's transaction when given, else one of the backend's."""
    if connection is not None:
        yield connection
        return
    async with backend.transaction() as own:
        yield own


def _traced(plan: _BatchPlan, trace: tuple[str | None, str | None]) -> _BatchPlan:
    """The finalizer linked to the span that enqueued its batch."""
    if plan.finalizer is None:
        return plan
    trace_id, span_id = trace
    return replace(plan, finalizer=replace(plan.finalizer, trace_id=trace_id, span_id=span_id))


class BatchMethods:
    """The batch half of JobsClient (mixed into it; every method needs an open client)."""

    async def _enqueue_tracked_batch(
        self: _Client,
        items: Sequence[Item],
        *,
        failure_policy: AbortBatchAfter | None,
        finalizer: Item | None,
        batch_id: UUID | str | None,
        connection: Any,
    ) -> list[JobRow]:
        """``enqueue_batch`` with a batch id, and a row when a policy or finalizer is given."""
        plan = await _plan_batch(self, failure_policy, finalizer, batch_id)
        batch = await self.planner.prepare(items)
        await self.planner.check_capacity(batch.counts)
        batch.batch_tag = str(plan.id)
        backend = self.backend
        if not plan.tracked:
            if not batch:
                return []
            with producer_span(batch.queue, batch.actor) as batch.trace:
                rows = await backend.enqueue_batch(batch, connection=connection)
            count_sent((row.queue, row.actor) for row in rows)
            return rows
        queue = batch.queue if batch else None
        actor = batch.actor if batch else plan.finalizer.actor if plan.finalizer else ""
        with producer_span(plan.new_batch(queue, 0).queue, actor) as batch.trace:
            row = _traced(plan, batch.trace).new_batch(queue, len(batch))
            async with _transaction(backend, connection) as conn:
                # The row first: an id already taken is refused before any child is sent.
                await backend.create_batch(row, connection=conn)
                if not batch:
                    return []
                rows = await backend.enqueue_batch(batch, connection=conn)
        count_sent((row.queue, row.actor) for row in rows)
        return rows

    async def enqueue_batch_streaming(
        self: _Client,
        items: Iterable[Item],
        *,
        chunk_size: int = MAX_CHUNK,
        failure_policy: AbortBatchAfter | None = None,
        finalizer: Item | None = None,
        batch_id: UUID | str | None = None,
        connection: Any = None,
    ) -> BatchEnqueued:
        """Enqueue a batch too large for memory, from any iterable (a generator too), in
        chunks of ``chunk_size`` items (1 to 1000); returns ``BatchEnqueued(batch_id, count)``:
        the id every child carries as ``metadata["batch_id"]`` and how many were inserted.

        With a ``failure_policy`` or a ``finalizer`` every chunk and the batch's row (made
        last, once the size is known) go in one transaction: all or nothing. Without them
        (no row), each chunk commits on its own unless ``connection`` is given: a refused
        item then leaves the chunks before it stored. ``connection``: everything in the
        caller's transaction.
        """
        if isinstance(chunk_size, bool) or not 1 <= chunk_size <= MAX_CHUNK:
            raise ConfigError(f"chunk_size must be 1 to {MAX_CHUNK}, got {chunk_size}")
        plan = await _plan_batch(self, failure_policy, finalizer, batch_id)
        backend = self.backend
        if not plan.tracked and connection is None:
            count, _ = await _stream(self, items, chunk_size, plan.id, None)
            return BatchEnqueued(plan.id, count)
        async with _transaction(backend, connection) as conn:
            count, queue = await _stream(self, items, chunk_size, plan.id, conn)
            if plan.tracked:
                await backend.create_batch(plan.new_batch(queue, count), connection=conn)
        return BatchEnqueued(plan.id, count)

    async def get_batch(self: _Client, batch_id: UUID | str) -> BatchRow | None:
        """The batch's row (status, consecutive failures, finalizer), or None: the batch has
        no row (enqueued without a policy or finalizer, pruned, or never made)."""
        return await self.backend.get_batch(_batch_uuid(batch_id))

    async def wait_for_batch(
        self: _Client,
        batch_id: UUID | str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_WAIT_POLL,
        expect_at_least: int | None = None,
        on_empty: OnEmpty = "error",
        snooze: timedelta | None = None,
    ) -> BatchCompletionStatus:
        """Wait until every child of the batch is terminal; returns their counts by status.

        Raises BatchAbortedError once an aborted batch has no child left running;
        EmptyBatchError when fewer than ``expect_at_least`` children exist and none is left
        to wait for, or when the batch has no child and no row (``on_empty="ok"``: return
        the empty status instead). A batch with a row is waited on until its row has left
        ``active`` too, so the status returned says ``complete``.

        Blocking mode (``snooze`` None) looks again every ``poll_interval`` seconds, growing
        to 1 s, and raises TimeoutError after ``timeout``. Snooze mode is for an actor's
        body (a finalizer that waits for another batch): instead of waiting it raises
        ``Snooze(snooze)``, so the job runs again later without holding a worker.
        """
        if on_empty not in ("error", "ok"):
            raise ConfigError(f"on_empty must be 'error' or 'ok', got {on_empty!r}")
        ident = _batch_uuid(batch_id)
        interval = poll_interval
        async with asyncio.timeout(timeout):
            while True:
                # Counts first: a batch seen with no child left to wait for is then read
                # with the row its last outcome produced (complete or aborted).
                counts = await self.backend.count_batch_jobs(ident)
                row = await self.backend.get_batch(ident)
                status = None if row is None else row.status
                decision = decide_wait(
                    counts, status, expect_at_least=expect_at_least, on_empty=on_empty
                )
                if decision is WaitDecision.DONE:
                    return BatchCompletionStatus(ident, status, dict(counts.by_status))
                if decision is WaitDecision.ABORTED:
                    raise BatchAbortedError(ident)
                if decision is WaitDecision.EMPTY:
                    expected = "" if expect_at_least is None else f" of {expect_at_least}"
                    raise EmptyBatchError(f"batch {ident} has {counts.total}{expected} children")
                if snooze is not None:
                    raise Snooze(snooze)
                await asyncio.sleep(interval)
                interval = min(interval * 1.5, max(poll_interval, 1.0))


async def _stream(
    client: _Client, items: Iterable[Item], chunk_size: int, batch_id: UUID, connection: Any
) -> tuple[int, str | None]:
    """Insert ``items`` chunk by chunk (each checked and tagged as ``enqueue_batch`` does);
    returns how many, and the first chunk's queue (None: no item)."""
    backend, tag = client.backend, str(batch_id)
    source = iter(items)
    count, queue = 0, None
    while chunk := list(itertools.islice(source, chunk_size)):
        batch = await client.planner.prepare(chunk)
        await client.planner.check_capacity(batch.counts)
        batch.batch_tag = tag
        if queue is None:
            queue = batch.queue
        with producer_span(batch.queue, batch.actor) as batch.trace:
            count += await backend.enqueue_batch_fast(batch, connection=connection)
        count_sent(batch.destinations())
    return count, queue
