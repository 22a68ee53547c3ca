"""Enqueue: one job through a statement, batches through binary COPY (see ``bulk``)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from taskq_core.backend.protocol import EnqueueArgs, JobRow, start_time
from taskq_core.backend.protocol.client import duplicate_id_error, is_same_job
from taskq_core.backend.protocol.sizes import check_payload_size, payload_too_large
from taskq_core.backend.protocol.unique import check_unique, collision
from taskq_core.errors import SingletonCollisionError, TransientDatabaseError
from taskq_core.ids import uuid7, uuid7_batch_ints

from . import bulk, rows
from .core import BackendCore

_RETRY_KINDS = frozenset({"transient", "indefinite", "non_retryable"})
# The index that refuses a second holder of a unique key (migration 0008): a unique violation
# on it is a SingletonCollisionError, any other (the primary key) a duplicate id.
UNIQUE_KEY_INDEX = "jobs_unique_key_idx"
# How often ``enqueue`` runs its statement when a conflicting insert committed while it
# waited: each run takes a fresh snapshot, so the second sees the row; more only under churn.
_ENQUEUE_RUNS = 3


def _validate(args: EnqueueArgs) -> None:
    """Reject an item as the schema's CHECK constraints would, before anything is sent."""
    if args.max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {args.max_attempts}")
    if args.retry_kind not in _RETRY_KINDS:
        raise ValueError(f"unknown retry_kind {args.retry_kind!r}")
    check_unique(args.unique_key, args.unique_for)


def _check(args: EnqueueArgs) -> UUID:
    """Validate one item and return its (possibly new) job id."""
    _validate(args)
    return args.job_id or uuid7()


# Rows per COPY data message: a batch goes out in about four slices (so even a small one
# overlaps its encoding with the server's inserts), of 250 to 1,000 rows.
_COPY_SLICE_ROWS = (250, 1000)


@dataclass(slots=True)
class _CopyBatch:
    """A bulk enqueue, prepared and streamed to the server a slice at a time.

    Each slice is validated, given its ids, serialized and encoded while the server inserts
    the slice before it (two cores at work, not one after the other); for ``enqueue_batch``
    the JobRows are built in the same pass. Items are encoded one by one as they are read, so
    nothing per item outlives its row unless the rows are asked for (no work for the garbage
    collector). An invalid item ends the stream early (with a well-formed trailer) and is
    raised once the COPY returns, inside its transaction, so the whole batch rolls back: a
    batch commits entirely or not at all.
    """

    args_list: Sequence[EnqueueArgs]
    rows: list[JobRow] | None
    max_payload_bytes: int
    error: Exception | None = None
    wake: bool = False  # some job of the batch is dispatchable now
    due_in: float | None = None  # seconds until the earliest job that waits for a time is due
    # The unique keys sent, as stored: the key the caller gave and the item's id.
    keys: dict[str, tuple[str, UUID]] = field(default_factory=dict)

    async def stream(self, now: datetime) -> AsyncIterator[bytes]:
        encoder = bulk.RowEncoder(now)
        count = len(self.args_list)
        least, most = _COPY_SLICE_ROWS
        step = min(most, max(least, -(-count // 4)))
        items = iter(self.args_list)  # a client's batch builds each item here
        data = bulk.HEADER
        for start in range(0, count, step):
            try:
                size = min(step, count - start)
                data += self._encode(encoder, itertools.islice(items, size), size)
            except Exception as exc:  # raised by _copy_in, after the COPY, to roll it back
                self.error = exc
                break
            if start + step < count:
                yield data
                data = b""
        yield data + bulk.TRAILER

    def _encode(self, encoder: bulk.RowEncoder, items: Iterable[EnqueueArgs], size: int) -> bytes:
        """The rows of a slice of ``size`` items; appends their JobRows when asked for."""
        parts: list[bytes] = []
        built = self.rows
        fresh = iter(uuid7_batch_ints(size))  # an item with its own id leaves one unused
        for args in items:
            _validate(args)
            job_id = next(fresh) if args.job_id is None else args.job_id.int
            payload = bulk.jsonb_field(args.payload)
            if len(payload) - bulk.JSONB_FIELD_HEAD > self.max_payload_bytes:
                size = len(payload) - bulk.JSONB_FIELD_HEAD  # ASCII text: a byte a character
                raise payload_too_large(args.actor, size, self.max_payload_bytes)
            metadata = bulk.jsonb_field(args.metadata)
            parts.append(encoder.row(args, job_id, payload, metadata))
            if args.unique_key is not None:
                self._hold(encoder, args, UUID(int=job_id))
            start = start_time(args, encoder.now)
            if args.waiting:  # a workflow step: its release wakes or announces it
                pass
            elif start is None:
                self.wake = True
            else:
                due_in = (start - encoder.now).total_seconds()
                if self.due_in is None or due_in < self.due_in:
                    self.due_in = due_in
            if built is not None:
                built.append(encoder.job_row(args, UUID(int=job_id), payload, metadata))
        return b"".join(parts)

    def _hold(self, encoder: bulk.RowEncoder, args: EnqueueArgs, job_id: UUID) -> None:
        """Note the item's stored key; a key an earlier item of the batch holds refuses the
        batch here, before the row is sent (the unique index would refuse it anyway)."""
        assert args.unique_key is not None
        stored, until = encoder.unique(args)
        assert stored is not None
        earlier = self.keys.get(stored)
        if earlier is not None:
            raise collision(args.unique_key, earlier[1], until, encoder.now)
        self.keys[stored] = (args.unique_key, job_id)


def _enqueue_params(core: BackendCore, args: EnqueueArgs) -> tuple[Any, ...]:
    job_id = _check(args)
    payload = bulk.dumps(args.payload)
    check_payload_size(args.actor, payload, core.max_payload_bytes)
    return (
        job_id,
        args.actor,
        args.queue,
        payload,
        args.priority,
        args.delay,
        args.identity_key,
        args.fairness_key,
        args.schedule_to_close,
        args.retry_kind,
        args.max_attempts,
        args.result_ttl,
        bulk.dumps(args.metadata),
        args.trace_id,
        args.span_id,
        core._wake_channel,
        args.unique_key,
        args.unique_for,
        args.run_at,
        core._events_channel,
    )


async def enqueue_job(core: BackendCore, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
    """Insert one job; pending jobs NOTIFY the wake channel. No event (not a transition).

    Idempotent on the id: an existing job with the same id comes back unchanged when it is
    the same job (a retry whose first answer was lost), and raises ValueError otherwise.
    ``connection`` may be any asyncpg connection: the statement binds JSON as text, so it
    does not depend on the connection's codecs, and it commits with the caller.
    """
    params = _enqueue_params(core, args)
    executor: Any = core._pool if connection is None else connection
    for _ in range(_ENQUEUE_RUNS):
        record = await executor.fetchrow(core._queries["enqueue"], *params)
        if record["id"] is not None:  # inserted, or the job already under this id
            job = rows.job_from_text_json(record)
            if not record["created"] and not is_same_job(job, args):
                raise duplicate_id_error(job.id)
            return job
        if record["holder_id"] is not None:
            assert args.unique_key is not None
            raise collision(
                args.unique_key, record["holder_id"], record["holder_until"], record["now"]
            )
        # The id's or the key's other insert committed while this one waited on it: its
        # row was not in this statement's snapshot; the next statement's has it (or, when
        # it has ended meanwhile, the insert goes through).
    raise TransientDatabaseError(
        f"enqueue of job {params[0]} kept conflicting with concurrent inserts; retry"
    )


class EnqueuePart(BackendCore):
    """enqueue, enqueue_batch (COPY, rows built from what was sent), enqueue_batch_fast."""

    # A module function, bound here without a wrapper: the batch part enqueues finalizers
    # through it on its own connection, and a client's enqueue pays no extra call.
    enqueue = enqueue_job

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        # COPY, as ``enqueue_batch_fast``. Every column of a new row is known without reading it
        # back: the item, the database clock read in the same transaction, and the schema
        # defaults (no trigger writes to ``jobs``). So the rows are built from what was sent,
        # the JSON columns decoded from the very text the COPY carried (as the in-memory backend
        # does).
        if not args_list:
            return []
        rows: list[JobRow] = []
        await copy_jobs(self, args_list, connection, rows)
        return rows

    async def replace_waiting_job(
        self, job_id: UUID, args: EnqueueArgs, *, connection: Any = None
    ) -> JobRow | None:
        payload = bulk.dumps(args.payload)
        check_payload_size(args.actor, payload, self.max_payload_bytes)
        executor: Any = self._pool if connection is None else connection
        record = await executor.fetchrow(
            self._queries["replace_waiting_job"],
            job_id, payload, args.delay, args.run_at, self._wake_channel, self._events_channel,
        )  # fmt: skip
        return None if record is None else rows.job_from_text_json(record)

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        # Binary COPY, no RETURNING. The rows are encoded by ``bulk`` (no connection codec
        # involved), so TaskQ's own connections and a caller's take the same path.
        if not args_list:
            return 0
        await copy_jobs(self, args_list, connection)
        return len(args_list)


async def copy_jobs(
    core: BackendCore,
    args_list: Sequence[EnqueueArgs],
    connection: Any,
    rows: list[JobRow] | None = None,
) -> None:
    """COPY the batch in one transaction; with ``rows``, append the new rows in order."""
    batch = _CopyBatch(args_list, rows, core.max_payload_bytes)
    if connection is None:
        async with core._pool.acquire() as conn:
            await _copy_in(core, conn, batch)
    else:
        await _copy_in(core, connection, batch)


async def _copy_in(core: BackendCore, conn: Any, batch: _CopyBatch) -> None:
    try:
        await _copy_in_transaction(core, conn, batch)
    except asyncpg.UniqueViolationError as exc:
        # Rolled back by now: find who holds which key, or report the id.
        if exc.constraint_name == UNIQUE_KEY_INDEX:
            raise await _batch_collision(core, conn, batch) from exc
        raise ValueError(f"a job id of this batch already exists: {exc.detail}") from exc


async def _batch_collision(
    core: BackendCore, conn: Any, batch: _CopyBatch
) -> SingletonCollisionError:
    """The error for a batch the unique index refused: a stored job holds one of its keys
    (or, when that job ended since, no holder is known any more)."""
    record = await conn.fetchrow(core._queries["unique_holder"], list(batch.keys))
    if record is None:
        given = next(iter(batch.keys.values()))[0]
        return SingletonCollisionError(given, None, None)
    given = batch.keys[record["unique_key"]][0]
    return collision(given, record["id"], record["unique_until"], record["now"])


async def _copy_in_transaction(core: BackendCore, conn: Any, batch: _CopyBatch) -> None:
    async with conn.transaction():
        # Delays and deadlines resolve on the database clock (the arbiter's time).
        now: datetime = await conn.fetchval(core._queries["copy_clock"])
        await conn.copy_to_table(
            "jobs",
            source=batch.stream(now),
            columns=bulk.COLUMNS,
            schema_name=core.schema,
            format="binary",
        )
        if batch.error is not None:
            raise batch.error  # an invalid item: the transaction rolls back
        if batch.wake:  # COPY cannot notify; delivered only if this transaction commits
            await conn.execute(core._queries["copy_wake"], core._wake_channel)
        if batch.due_in is not None:
            await conn.execute(core._queries["copy_announce"], core._events_channel, batch.due_in)
