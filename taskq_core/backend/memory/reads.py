"""Reads: one job, listings and counts, a job's history, and the dashboard's per-queue activity
and recent jobs. Nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from taskq_core.backend.protocol import (
    AttemptRow,
    DashboardStats,
    EventRow,
    JobFilter,
    JobRow,
    JobSummary,
    QueueActivity,
    QueueStatusCount,
    check_dashboard_window,
    check_recent_limit,
)
from taskq_core.backend.protocol.admin import (
    DUE_SCHEDULED_SCAN,
    JobPage,
    JobQuery,
    TimeBound,
    normalize_id_fragment,
)
from taskq_core.backend.protocol.batches import BATCH_ID_KEY
from taskq_core.backend.protocol.history import with_success_attempt, with_success_event
from taskq_core.backend.protocol.retention import archive_readable
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus

from .jsonb import freeze
from .lookups import matching
from .store import PENDING, RUNNING, SCHEDULED, JobRecord, MemoryStore

_STATUS_ORDER = {status: index for index, status in enumerate(JobStatus)}  # PG enum order
_ANY_STATUS = frozenset(JobStatus)


class ReadsPart(MemoryStore):
    """Job reads, counts, history and the dashboard's reads."""

    async def get(self, job_id: UUID) -> JobRow | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.snapshot()

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        return self.jobs_now(filter)

    def jobs_now(self, filter: JobFilter) -> list[JobRow]:
        """``list_jobs`` without awaiting (the store is in this process): what the testing
        helpers' assertions read."""
        # created_at DESC, id DESC.
        return [job.snapshot() for job in matching(self, filter, _ANY_STATUS)]

    async def count_jobs(self, filter: JobFilter) -> int:
        return len(matching(self, filter, _ANY_STATUS))

    async def list_job_ids_matching(self, fragment: str, limit: int) -> list[UUID]:
        digits = normalize_id_fragment(fragment)
        now = self._now()
        archived = [i for i, a in self._archived_jobs.items() if archive_readable(a.expire_at, now)]
        found = [
            ident
            for ident in {*self._jobs, *archived}
            if ident.hex.startswith(digits) or ident.hex.endswith(digits)
        ]
        return sorted(found)[: max(limit, 0)]

    async def search_jobs(self, query: JobQuery) -> JobPage:
        now = self._now()
        since, until = _moment(query.created_since, now), _moment(query.created_until, now)
        ended = _moment(query.finished_since, now), _moment(query.finished_until, now)
        # A child names its batch by the id's text, as PostgreSQL compares it.
        batch = None if query.batch_id is None else str(query.batch_id)
        found = [
            job
            for job in self._jobs.values()
            if (query.statuses is None or job.status in query.statuses)
            and (query.queues is None or job.queue in query.queues)
            and (query.actors is None or job.actor in query.actors)
            and (since is None or job.created_at >= since)
            and (until is None or job.created_at < until)
            and _finished_within(job.finished_at, *ended)
            and (batch is None or job.metadata.get(BATCH_ID_KEY) == batch)
        ]
        found.sort(key=lambda job: (job.created_at, job.id), reverse=True)
        total = len(found)
        if query.after is not None:
            found = [job for job in found if (job.created_at, job.id) < query.after]
        page = [job.summary() for job in found[: query.limit]]
        more = len(found) > query.limit and bool(page)
        return JobPage(
            jobs=page,
            total=min(total, query.count_max),
            total_exact=total <= query.count_max,
            next_after=(page[-1].created_at, page[-1].id) if more else None,
        )

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        counts = Counter((job.queue, job.status) for job in self._jobs.values())
        keys = sorted(counts, key=lambda key: (key[0], _STATUS_ORDER[key[1]]))
        return [QueueStatusCount(queue, status, counts[queue, status]) for queue, status in keys]

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        wanted = set(queues)
        return any(j.queue in wanted and j.status in ACTIVE_STATUSES for j in self._jobs.values())

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        wanted = set(actors)
        counts = Counter(
            job.actor
            for job in self._jobs.values()
            if job.actor in wanted and job.status in (PENDING, SCHEDULED)
        )
        return dict(counts)

    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        return with_success_attempt(self._jobs.get(job_id), list(self._attempts.get(job_id, [])))

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        stored = [freeze(e, EventRow) for e in self._events if e.job_id == job_id]
        return with_success_event(self._jobs.get(job_id), stored)

    async def get_dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        check_dashboard_window(window, minutes)
        now = self._now()
        names = sorted({job.queue for job in self._jobs.values()} | set(self._queues))
        due = _due_scheduled(self._jobs.values(), now)
        activity = []
        for name in names:
            jobs = [job for job in self._jobs.values() if job.queue == name]
            counts = Counter(job.status for job in jobs)
            claims = [
                job.claimed_at
                for job in jobs
                if job.status is RUNNING and job.started_at is None and job.claimed_at
            ]
            claimed = sum(1 for job in jobs if job.status is RUNNING and job.started_at is None)
            pending = [job.scheduled_at for job in jobs if job.status is PENDING]
            finished: Counter[JobStatus] = Counter()
            per_minute = [0] * minutes
            for job in jobs:
                if job.status not in TERMINAL_STATUSES or job.finished_at is None:
                    continue
                age = now - job.finished_at
                if age <= window:
                    finished[job.status] += 1
                minute_ago = max(int(age.total_seconds() // 60), 0)
                if minute_ago < minutes:
                    per_minute[minutes - 1 - minute_ago] += 1
            settings = self._queue_row(name)
            activity.append(
                QueueActivity(
                    name=name,
                    mode=settings.mode,
                    max_concurrent=settings.max_concurrent,
                    paused=settings.paused,
                    pending=counts[PENDING],
                    scheduled=counts[SCHEDULED],
                    running=counts[RUNNING] - claimed,
                    oldest_pending_at=min(pending, default=None),
                    finished={s: finished[s] for s in JobStatus if finished[s]},
                    finished_per_minute=per_minute,
                    claimed=claimed,
                    oldest_claimed_at=min(claims, default=None),
                    oldest_due_scheduled_at=due.get(name),
                )
            )
        return DashboardStats(now=now, window=window, queues=activity)

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobSummary]:
        # Activity: finished_at when finished, started_at (else claimed_at) when running,
        # created_at when waiting; ties id DESC.
        check_recent_limit(filter)

        def activity(job: JobRecord) -> tuple[datetime, UUID]:
            if job.status in TERMINAL_STATUSES and job.finished_at is not None:
                return job.finished_at, job.id
            if job.status is RUNNING:
                since = job.started_at or job.claimed_at
                if since is not None:
                    return since, job.id
            return job.created_at, job.id

        found = matching(self, replace(filter, limit=None), _ANY_STATUS)
        found.sort(key=activity, reverse=True)
        return [job.summary() for job in found[: filter.limit]]


def _due_scheduled(jobs: Collection[JobRecord], now: datetime) -> dict[str, datetime]:
    """Each queue's longest-due scheduled job, among the DUE_SCHEDULED_SCAN due longest."""
    due = sorted(j.scheduled_at for j in jobs if j.status is SCHEDULED and j.scheduled_at <= now)
    cutoff = due[DUE_SCHEDULED_SCAN - 1] if len(due) >= DUE_SCHEDULED_SCAN else now
    oldest: dict[str, datetime] = {}
    for job in jobs:
        if job.status is SCHEDULED and job.scheduled_at <= cutoff:
            oldest[job.queue] = min(job.scheduled_at, oldest.get(job.queue, job.scheduled_at))
    return oldest


def _finished_within(
    finished_at: datetime | None, since: datetime | None, until: datetime | None
) -> bool:
    """Whether ``finished_at`` is within [since, until); an unfinished job is within no bound."""
    if since is None and until is None:
        return True
    if finished_at is None:
        return False
    return (since is None or finished_at >= since) and (until is None or finished_at < until)


def _moment(bound: TimeBound, now: datetime) -> datetime | None:
    """A JobQuery time bound as a moment: an age counts back from the backend's now."""
    return now - bound if isinstance(bound, timedelta) else bound
