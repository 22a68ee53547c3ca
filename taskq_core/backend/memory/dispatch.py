"""Dispatch: claiming due jobs, holding their leases (heartbeat, start marks, cancel flags), and
the dispatch order itself, which ``get_dispatch_position`` reads too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import (
    CancelFlag,
    DispatchPosition,
    HeartbeatResult,
    JobRow,
    Lease,
    QueueMode,
    Start,
)

from .store import PENDING, RUNNING, JobRecord, MemoryStore

# last_served of a cohort that never had a job claimed: first, as NULLS FIRST sorts it.
_NEVER_SERVED = datetime.min.replace(tzinfo=UTC)
# dispatch.sql's bounds: a round_robin queue gets one candidate window per fairness cohort
# up to this many cohorts, then falls back to the shared window ranked by cohort...
_COHORT_BUDGET = 128
# ...its cohort windows stay whole while they add up to at most this many rows, then split
# evenly; and a shared window always holds at least _SHARED_WINDOW_FLOOR rows.
_COHORT_ROWS = 256
_SHARED_WINDOW_FLOOR = 16


def _fifo_key(job: JobRecord) -> tuple[int, datetime, UUID]:
    """strict_fifo order (and the order inside a round-robin cohort): priority DESC,
    scheduled_at, id."""
    return (-job.priority, job.scheduled_at, job.id)


def _flags(jobs: Iterable[JobRecord]) -> list[CancelFlag]:
    """The cancel flags of the jobs asked to cancel, oldest request first."""
    flagged = sorted(
        (job for job in jobs if job.cancel_requested_at is not None),
        key=lambda job: (job.cancel_requested_at, job.id),
    )
    return [
        CancelFlag(job.id, job.cancel_phase, job.cancel_requested_at, job.cancel_reason)
        for job in flagged
    ]


class DispatchPart(MemoryStore):
    """``dispatch_batch``, ``heartbeat``, ``mark_started_many``, ``poll_cancel_flags`` and
    ``get_dispatch_position``."""

    def __init__(self, *, dispatch_oversample: int = 2, **kwargs: Any) -> None:
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        super().__init__(**kwargs)
        self._oversample = dispatch_oversample

    def _last_served(self, queues: Iterable[str]) -> dict[tuple[str, str], datetime]:
        """When a job of each (queue, fairness cohort) of ``queues`` was last claimed (any
        status; the cohorts that never had a job claimed are missing)."""
        wanted = set(queues)
        served: dict[tuple[str, str], datetime] = {}
        for job in self._jobs.values():
            if job.queue in wanted and job.claimed_at is not None:
                key = (job.queue, job.cohort)
                last = served.get(key)
                served[key] = job.claimed_at if last is None else max(last, job.claimed_at)
        return served

    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        """Claim up to ``limit`` due pending jobs of ``queues`` for ``worker_id``: -> running."""
        if limit <= 0:
            return []
        now = self._now()
        oversample = self._oversample
        running = [job for job in self._jobs.values() if job.status is RUNNING]
        actor_load = Counter(job.actor for job in running)
        queue_load = Counter(job.queue for job in running)
        taken = {(job.actor, job.identity_key) for job in running if job.identity_key is not None}
        requested = dict.fromkeys(queues)
        pending: dict[str, list[JobRecord]] = {name: [] for name in requested}
        for job in self._jobs.values():
            if job.status is PENDING and job.queue in pending:
                pending[job.queue].append(job)

        mode_order: dict[QueueMode, int] = {}
        queue_mode: dict[str, QueueMode] = {}
        queue_room: dict[str, int] = {}
        queue_cap: dict[str, int] = {}
        for position, name in enumerate(requested):
            row = self._queue_row(name)
            if row.paused:
                continue
            mode_order.setdefault(row.mode, position)
            queue_mode[name] = row.mode
            room = limit
            if row.max_concurrent is not None:
                room = queue_cap[name] = min(limit, row.max_concurrent - queue_load[name])
            if room > 0:
                queue_room[name] = room

        with_pending = {job.actor for jobs in pending.values() for job in jobs}
        capped = {
            actor: min(limit, config.max_concurrent - actor_load[actor])
            for actor, config in self._actor_configs.items()
            if config.max_concurrent is not None and actor in with_pending
        }

        candidates: list[JobRecord] = []
        for name, room in queue_room.items():
            due = sorted((job for job in pending[name] if job.scheduled_at <= now), key=_fifo_key)
            free = [job for job in due if job.actor not in capped]
            size = room * oversample
            cohorts = len({job.cohort for job in pending[name]})
            if queue_mode[name] == "strict_fifo" or cohorts > _COHORT_BUDGET:
                candidates.extend(free[: max(size, _SHARED_WINDOW_FLOOR)])
            elif cohorts:
                if cohorts * size > _COHORT_ROWS:
                    size = max(-(-size // cohorts) + 1, _COHORT_ROWS // cohorts)
                per_cohort: Counter[str] = Counter()
                for job in free:
                    per_cohort[job.cohort] += 1
                    if per_cohort[job.cohort] <= size:
                        candidates.append(job)
            for actor, residual in capped.items():
                if residual > 0:
                    mine = [job for job in due if job.actor == actor]
                    candidates.extend(mine[: residual * oversample])

        round_robin = [job for job in candidates if queue_mode[job.queue] == "round_robin"]
        served = self._last_served({job.queue for job in round_robin})
        ranks: Counter[str] = Counter()
        fairness: dict[UUID, tuple[int, datetime]] = {}
        for job in sorted(round_robin, key=_fifo_key):
            ranks[job.cohort] += 1
            fairness[job.id] = (
                ranks[job.cohort],
                served.get((job.queue, job.cohort), _NEVER_SERVED),
            )

        def dispatch_order(job: JobRecord) -> tuple[Any, ...]:
            rank, last_served = fairness.get(job.id, (1, _NEVER_SERVED))
            mode = mode_order[queue_mode[job.queue]]
            return (mode, rank, -job.priority, last_served, job.scheduled_at, job.id)

        candidates.sort(key=dispatch_order)

        actor_rank: Counter[str] = Counter()
        queue_rank: Counter[str] = Counter()
        claimed: list[JobRecord] = []
        for job in candidates:
            if job.identity_key is not None:
                identity = (job.actor, job.identity_key)
                if identity in taken:
                    continue
                taken.add(identity)
            actor_rank[job.actor] += 1
            if job.actor in capped and actor_rank[job.actor] > capped[job.actor]:
                continue
            queue_rank[job.queue] += 1
            if job.queue in queue_cap and queue_rank[job.queue] > queue_cap[job.queue]:
                continue
            claimed.append(job)
            if len(claimed) == limit:
                break
        for job in claimed:
            self._transition(job, RUNNING, worker_id=worker_id)
            job.attempt += 1
            job.locked_by_worker = worker_id
            job.lock_expires_at = now + lock_lease
            job.claimed_at = now
            job.started_at = None
        return [job.snapshot() for job in claimed]

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        """The job's place in its queue's dispatch order, as ``dispatch_batch`` ranks it."""
        target = self._jobs.get(job_id)
        if target is None:
            return None
        now = self._now()
        mode = self._queue_row(target.queue).mode
        if target.status is not PENDING or target.scheduled_at > now:
            return DispatchPosition(now, mode, 0, 0)
        due = sorted(
            (
                job
                for job in self._jobs.values()
                if job.status is PENDING and job.queue == target.queue and job.scheduled_at <= now
            ),
            key=_fifo_key,
        )
        served = self._last_served([target.queue])
        ranks: Counter[str] = Counter()
        order: dict[UUID, tuple[Any, ...]] = {}
        for job in due:
            ranks[job.cohort] += 1
            key: tuple[Any, ...] = _fifo_key(job)
            if mode == "round_robin":
                last_served = served.get((job.queue, job.cohort), _NEVER_SERVED)
                key = (ranks[job.cohort], -job.priority, last_served, *key[1:])
            order[job.id] = key
        ahead = [job for job in due if order[job.id] < order[target.id]]
        other = sum(1 for job in ahead if job.cohort != target.cohort)
        return DispatchPosition(now, mode, len(ahead), other)

    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        """Touch the worker row, extend the named leases still this worker's, ping the leader
        row, read their cancel flags."""
        now = self._now()
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.last_seen_at = now
        held: list[JobRecord] = []
        extended: set[UUID] = set()
        for lease in leases:
            job = self._leased(replace(lease, worker_id=worker_id))
            if job is None:
                continue
            held.append(job)
            if not self._settling(job.id):  # a row being settled is skipped, as PG skips it
                job.lock_expires_at = now + lock_lease
                job.updated_at = now
                extended.add(job.id)
        if is_leader and self._leader is not None and self._leader.worker_id == worker_id:
            self._leader = replace(self._leader, last_seen_at=now)
        return HeartbeatResult(
            held=frozenset(job.id for job in held),
            extended=frozenset(extended),
            cancel_flags=_flags(held),
        )

    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        """started_at = now - ran_for for claimed jobs whose lease is still this worker's."""
        written: set[UUID] = set()
        for start in starts:
            job = self._leased(Lease(start.job_id, worker_id, start.attempt))
            if job is not None and job.started_at is None:
                job.started_at = self._now() - timedelta(seconds=start.ran_for)
                written.add(job.id)
        return written

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        """Running jobs of this worker with a cancel requested, oldest request first."""
        return _flags(
            job
            for job in self._jobs.values()
            if job.status is RUNNING and job.locked_by_worker == worker_id
        )
