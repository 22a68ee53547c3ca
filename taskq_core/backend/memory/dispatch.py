"""Dispatch: claiming due jobs, holding their leases (heartbeat, start marks, cancel flags), and
the dispatch order itself, which ``get_dispatch_position`` reads too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

from taskq_core.backend.protocol import (
    CancelFlag,
    DispatchPosition,
    ErrorInfo,
    HeartbeatResult,
    JobRow,
    Lease,
    LostAttempt,
    QueueMode,
    Start,
)

from .store import PENDING, RUNNING, JobRecord, MemoryStore

# last_served of a cohort that never had a job claimed: first, as NULLS FIRST sorts it.
_NEVER_SERVED = datetime.min.replace(tzinfo=UTC)

# A job's place in dispatch order inside its mode group: cohort rank (1 in strict_fifo),
# priority DESC, when its cohort was last served (round_robin only), scheduled_at, id.
_OrderKey = tuple[int, int, datetime, datetime, UUID]


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


# Mirrors postgres/dispatch.py on purpose: both implement protocol.worker, so each method restates
# its signature (mypy checks the match).
class DispatchPart(MemoryStore):
    """``dispatch_batch``, ``heartbeat``, ``mark_started_many``, ``poll_cancel_flags`` and
    ``get_dispatch_position``."""

    def _order_keys(
        self, due: Iterable[JobRecord], modes: Mapping[str, QueueMode]
    ) -> dict[UUID, _OrderKey]:
        """The dispatch order of ``due`` inside a mode group, the one home of that rule.

        strict_fifo: priority DESC, scheduled_at, id. round_robin: the same order inside
        each fairness cohort (counted across the round_robin queues of ``due``), cohorts
        interleaved by rank; among equal rank and priority, the cohort last served longest
        ago in its queue first (never served: first).
        """
        jobs = sorted(due, key=_fifo_key)
        fair = [job for job in jobs if modes[job.queue] == "round_robin"]
        served = self._last_served({job.queue for job in fair})
        ranks: Counter[str] = Counter()
        keys: dict[UUID, _OrderKey] = {}
        for job in jobs:
            rank, last_served = 1, _NEVER_SERVED
            if modes[job.queue] == "round_robin":
                ranks[job.cohort] += 1
                rank = ranks[job.cohort]
                last_served = served.get((job.queue, job.cohort), _NEVER_SERVED)
            keys[job.id] = (rank, -job.priority, last_served, job.scheduled_at, job.id)
        return keys

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
        # The order: mode group by mode group in the order the queues are given, then
        # ``_order_keys``; a job held back by its identity key keeps its place in its cohort's
        # rank; jobs of a full actor take none.
        if limit <= 0:
            return []
        now = self._now()
        running = [job for job in self._jobs.values() if job.status is RUNNING]
        busy = {(job.actor, job.identity_key) for job in running if job.identity_key is not None}
        actor_load = Counter(job.actor for job in running)
        queue_load = Counter(job.queue for job in running)
        actor_room = {
            actor: config.max_concurrent - actor_load[actor]
            for actor, config in self._actor_configs.items()
            if config.max_concurrent is not None
        }
        group: dict[QueueMode, int] = {}  # mode -> its first position among the queues
        modes: dict[str, QueueMode] = {}
        queue_room: dict[str, int | None] = {}  # None: no max_concurrent
        for position, name in enumerate(dict.fromkeys(queues)):
            row = self._queue_row(name)
            if row.paused:
                continue
            group.setdefault(row.mode, position)
            modes[name] = row.mode
            room = None
            if row.max_concurrent is not None:
                room = row.max_concurrent - queue_load[name]
            if room is None or room > 0:
                queue_room[name] = room
        due = [
            job
            for job in self._jobs.values()
            if job.status is PENDING
            and job.queue in queue_room
            and job.scheduled_at <= now
            and actor_room.get(job.actor, 1) > 0
        ]
        keys = self._order_keys(due, modes)
        due.sort(key=lambda job: (group[modes[job.queue]], keys[job.id]))

        claimed: list[JobRecord] = []
        for job in due:
            identity = None if job.identity_key is None else (job.actor, job.identity_key)
            if identity in busy or actor_room.get(job.actor, 1) <= 0:
                continue
            room = queue_room[job.queue]
            if room is not None and room <= 0:
                continue
            if identity is not None:
                busy.add(identity)
            if job.actor in actor_room:
                actor_room[job.actor] -= 1
            if room is not None:
                queue_room[job.queue] = room - 1
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
        # Among the due jobs of its queue, in ``_order_keys`` order.
        target = self._jobs.get(job_id)
        if target is None:
            return None
        now = self._now()
        mode = self._queue_row(target.queue).mode
        if target.status is not PENDING or target.scheduled_at > now:
            return DispatchPosition(now, mode, 0, 0)
        due = [
            job
            for job in self._jobs.values()
            if job.status is PENDING and job.queue == target.queue and job.scheduled_at <= now
        ]
        keys = self._order_keys(due, {target.queue: mode})
        ahead = [job for job in due if keys[job.id] < keys[target.id]]
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
            registered=worker is not None,
        )

    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        written: set[UUID] = set()
        for start in starts:
            job = self._leased(Lease(start.job_id, worker_id, start.attempt))
            if job is not None and job.started_at is None:
                job.started_at = self._now() - timedelta(seconds=start.ran_for)
                written.add(job.id)
        return written

    async def record_lost_attempts(self, worker_id: UUID, lost: Sequence[LostAttempt]) -> int:
        added = 0
        for body in lost:
            if body.job_id not in self._jobs or self._has_attempt(body.job_id, body.attempt):
                continue
            now = self._now()
            self._add_attempt_row(
                body.job_id,
                body.attempt,
                worker_id,
                "lost",
                started_at=now - timedelta(seconds=body.started_ago),
                finished_at=now - timedelta(seconds=body.ended_ago),
                error=ErrorInfo("LeaseLost", body.reason),
            )
            added += 1
        return added

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        return _flags(
            job
            for job in self._jobs.values()
            if job.status is RUNNING and job.locked_by_worker == worker_id
        )
