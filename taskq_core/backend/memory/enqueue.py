"""Enqueue: new job records (one, a batch, the bulk path) and the simulated caller-owned
transaction that buffers them until its block exits cleanly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import EnqueueArgs, JobRow, RetryKind, start_time
from taskq_core.backend.protocol.client import duplicate_id_error, is_same_job
from taskq_core.backend.protocol.sizes import check_enqueue_payload
from taskq_core.backend.protocol.unique import check_unique, collision, holds_key, stored_unique
from taskq_core.ids import uuid7

from .jsonb import as_json
from .lookups import held_keys
from .store import PENDING, SCHEDULED, WAITING, JobRecord, MemoryStore, MemoryTransaction

_RETRY_KINDS: frozenset[RetryKind] = frozenset({"transient", "indefinite", "non_retryable"})


def _new_job(args: EnqueueArgs, now: datetime, max_payload_bytes: int) -> JobRecord:
    """The record ``args`` inserts at ``now`` (ValueError for a bad item,
    PayloadTooLargeError for a payload over ``max_payload_bytes``)."""
    if args.max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {args.max_attempts}")
    if args.retry_kind not in _RETRY_KINDS:
        raise ValueError(f"unknown retry_kind {args.retry_kind!r}")
    check_unique(args.unique_key, args.unique_for)
    # The text jsontext wrote: read back, it is the jsonb copy as_json would make.
    payload = json.loads(check_enqueue_payload(args, max_payload_bytes))
    unique_key, unique_until = stored_unique(args, now)
    start = start_time(args, now)
    deadline = args.schedule_to_close
    return JobRecord(
        id=args.job_id or uuid7(),
        actor=args.actor,
        queue=args.queue,
        payload=payload,
        status=WAITING if args.waiting else PENDING if start is None else SCHEDULED,
        priority=args.priority,
        scheduled_at=now if start is None else start,
        created_at=now,
        updated_at=now,
        retry_kind=args.retry_kind,
        max_attempts=args.max_attempts,
        identity_key=args.identity_key,
        fairness_key=args.fairness_key,
        schedule_to_close=None if deadline is None else now + deadline,
        result_ttl=args.result_ttl,
        metadata=as_json(args.metadata),
        trace_id=args.trace_id,
        span_id=args.span_id,
        unique_key=unique_key,
        unique_until=unique_until,
    )


# Inserting, as functions of the store (the batch part inserts finalizers through them).
def insert_jobs(
    store: MemoryStore, args_list: Sequence[EnqueueArgs], connection: Any
) -> list[JobRecord]:
    """Build all rows first (so a bad item inserts nothing), then store or buffer them."""
    handle = None if connection is None else store._transaction_handle(connection)
    now = store._now()
    items = list(args_list)  # a client's batch builds each item as it is read: once
    jobs = [_new_job(args, now, store.max_payload_bytes) for args in items]
    taken = set(store._jobs)
    if handle is not None:
        taken.update(job.id for job in handle.buffered)
    for job in jobs:
        if job.id in taken:
            raise ValueError(f"a job with id {job.id} already exists")
        taken.add(job.id)
    _check_keys(store, items, jobs, handle)
    if handle is not None:
        handle.buffered.extend(jobs)
    else:
        _commit(store, jobs)
    return jobs


def _check_keys(
    store: MemoryStore,
    args_list: Sequence[EnqueueArgs],
    jobs: list[JobRecord],
    handle: MemoryTransaction | None,
) -> None:
    """Refuse the insert when a job holds one of its unique keys: a stored one, one
    buffered in the same transaction, or an earlier item of the same batch."""
    keyed = [
        (args.unique_key, job.unique_key, job)
        for args, job in zip(args_list, jobs, strict=True)
        if args.unique_key is not None and job.unique_key is not None
    ]
    if not keyed:
        return
    held = held_keys(store)
    if handle is not None:
        held.update(_holders(handle.buffered))
    for given, stored, job in keyed:
        holder = held.get(stored)
        if holder is not None:
            raise collision(given, holder.id, holder.unique_until, store._now())
        held[stored] = job
    if handle is not None:
        handle.given_keys.update((stored, given) for given, stored, _ in keyed)


def _commit(store: MemoryStore, jobs: Sequence[JobRecord]) -> None:
    """Store the records; one wake when any of them is pending."""
    any_pending = False
    for job in jobs:
        store._jobs[job.id] = job
        any_pending = any_pending or job.status is PENDING
    if any_pending:
        store._wake()
    store._announce_scheduled(jobs)


def _existing(store: MemoryStore, job_id: UUID | None, connection: Any) -> JobRow | None:
    """The job stored (or buffered in ``connection``'s transaction) under ``job_id``."""
    if job_id is None:
        return None
    job = store._jobs.get(job_id)
    if job is None and connection is not None:
        handle = store._transaction_handle(connection)
        job = next((j for j in handle.buffered if j.id == job_id), None)
    return None if job is None else job.snapshot()


def add_job(store: MemoryStore, args: EnqueueArgs, connection: Any) -> JobRow:
    """``enqueue``'s work, a function of the store: the batch part enqueues finalizers through
    it. The same job under an existing id comes back; another job under it is ValueError."""
    existing = _existing(store, args.job_id, connection)
    if existing is not None:
        if not is_same_job(existing, args):
            raise duplicate_id_error(existing.id)
        return existing
    return insert_jobs(store, [args], connection)[0].snapshot()


class EnqueuePart(MemoryStore):
    """``enqueue``, ``enqueue_batch``, ``enqueue_batch_fast`` and ``transaction``."""

    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        return add_job(self, args, connection)

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        return [job.snapshot() for job in insert_jobs(self, args_list, connection)]

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        return len(insert_jobs(self, args_list, connection))

    async def replace_waiting_job(
        self, job_id: UUID, args: EnqueueArgs, *, connection: Any = None
    ) -> JobRow | None:
        # A simulated transaction (``connection``) sees the replace at once, as everyone does.
        if connection is not None:
            self._transaction_handle(connection)
        payload = json.loads(check_enqueue_payload(args, self.max_payload_bytes))
        job = self._jobs.get(job_id)
        if job is None or job.status not in (PENDING, SCHEDULED):
            return None
        now, was = self._now(), job.status
        start = start_time(args, now)
        job.payload = payload
        job.status = PENDING if start is None else SCHEDULED
        job.scheduled_at = now if start is None else start
        job.updated_at = now
        self._record_event(job, "replaced", was, job.status, None)
        if job.status is PENDING:
            self._wake()
        self._announce_scheduled([job])
        return job.snapshot()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        # Simulated: buffered enqueues (and successes written through it) commit on clean exit
        # and vanish on error.
        handle = MemoryTransaction(self)
        self._open_transactions.add(handle)
        try:
            yield handle
        except BaseException:
            handle.buffered.clear()
            handle.on_commit.clear()
            raise
        finally:
            handle.open = False
            self._open_transactions.discard(handle)
        # Ids may have been taken outside the transaction meanwhile: a unique violation
        # at COMMIT, which rolls the whole transaction back.
        clashes = [job.id for job in handle.buffered if job.id in self._jobs]
        if clashes:
            raise ValueError(f"a job with id {clashes[0]} already exists")
        held = held_keys(self)  # and so may unique keys
        for key in _holders(handle.buffered):
            holder = held.get(key)
            if holder is not None:
                given = handle.given_keys[key]
                raise collision(given, holder.id, holder.unique_until, self._now())
        _commit(self, handle.buffered)
        for write in handle.on_commit:
            write()


def _holders(jobs: Iterable[JobRecord]) -> dict[str, JobRecord]:
    """The unique keys these (new) jobs hold, and which holds each."""
    return {
        job.unique_key: job
        for job in jobs
        if job.unique_key is not None and holds_key(job.status, job.unique_until)
    }
