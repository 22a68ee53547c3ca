"""Reads several memory parts share: a JobFilter's matches and the unique keys held now."""

from __future__ import annotations

from uuid import UUID

from taskq_core.backend.protocol import JobFilter
from taskq_core.backend.protocol.unique import holds_key
from taskq_core.statemachine import JobStatus

from .store import JobRecord, MemoryStore


def matching(store: MemoryStore, filter: JobFilter, among: frozenset[JobStatus]) -> list[JobRecord]:
    """Jobs the filter matches whose status is also in ``among``, newest first, limited."""
    allowed = filter.statuses()
    allowed = among if allowed is None else allowed & among
    ids: set[UUID] | None = None if filter.ids is None else set(filter.ids)
    found = [
        job
        for job in store._jobs.values()
        if job.status in allowed
        and (filter.queue is None or job.queue == filter.queue)
        and (filter.actor is None or job.actor == filter.actor)
        and (ids is None or job.id in ids)
    ]
    found.sort(key=lambda job: (job.created_at, job.id), reverse=True)
    return found if filter.limit is None else found[: filter.limit]


def unique_holder(store: MemoryStore, key: str) -> JobRecord | None:
    """The stored job that holds unique key ``key`` (as stored, a windowed key with its
    window's start) now, or None: the unique index's rule, a key with ``unique_until`` in
    every state, one without while its job waits or runs. An insert of a job with that key
    must not happen while this answers a job."""
    for job in store._jobs.values():
        if job.unique_key == key and holds_key(job.status, job.unique_until):
            return job
    return None


def held_keys(store: MemoryStore) -> dict[str, JobRecord]:
    """Every unique key held now and its holder (one pass, for a batch)."""
    return {
        job.unique_key: job
        for job in store._jobs.values()
        if job.unique_key is not None and holds_key(job.status, job.unique_until)
    }
