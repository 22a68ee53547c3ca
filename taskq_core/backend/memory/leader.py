"""The maintenance leader: election (the first worker to ask leads until it releases or lets
its lease lapse) and the sweeps, each one pass over the jobs on the injected clock. A
reclaimed job settles through ``settle``, as every other end of an attempt does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from taskq_core.backend.protocol import ErrorInfo, EventRow, LeaderRow, derived
from taskq_core.backend.protocol.workflows import WorkflowStatus, workflow_id_of
from taskq_core.constants import (
    CANCEL_RECLAIM_HEADROOM,
    DEFAULT_POISON_RECLAIMS,
)
from taskq_core.statemachine import JobStatus

from .jsonb import freeze
from .retention import in_batches
from .settle import is_blamed, reclaim
from .store import PENDING, RUNNING, SCHEDULED, JobRecord, MemoryStore

_ZERO = timedelta(0)
_DEADLINE_PASSED = ErrorInfo("DeadlineExceeded", "schedule_to_close passed before the job ran")


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


# Mirrors postgres/leader.py on purpose: both implement protocol.leader, so each method restates its
# signature (mypy checks the match).
class LeaderPart(MemoryStore):
    """Election, ``promote_scheduled_jobs``, ``fail_overdue_jobs``, ``reclaim_expired_leases``,
    ``expire_results``, ``delete_stale_workers``, ``list_waiting_queues`` and the reclaim events
    they leave."""

    # When the leader's lease lapses unless it asks again (None: no lease); PG's server ends
    # a silent leader's session after the same lease.
    _leader_expires_at: datetime | None = None

    async def try_acquire_leadership(
        self, worker_id: UUID, *, lease: timedelta | None = None
    ) -> bool:
        # A lease lapses only when another worker asks after it (PG: the server ends the silent
        # session).
        now = self._now()
        leader = self._leader
        if leader is not None and leader.worker_id != worker_id:
            if self._leader_expires_at is None or now < self._leader_expires_at:
                return False
            leader = None  # its lease lapsed: the asking worker takes over
        if leader is None:
            self._leader = LeaderRow(worker_id, elected_at=now, last_seen_at=now)
        else:
            self._leader = replace(leader, last_seen_at=now)
        self._leader_expires_at = None if lease is None else now + lease
        return True

    async def release_leadership(self, worker_id: UUID) -> None:
        if self._leader is not None and self._leader.worker_id == worker_id:
            self._leader = None
            self._leader_expires_at = None

    async def get_leader(self) -> LeaderRow | None:
        return self._leader

    async def get_next_due_in(self) -> float | None:
        waiting = [j.scheduled_at for j in self._jobs.values() if j.status is SCHEDULED]
        if not waiting:
            return None
        return max((min(waiting) - self._now()).total_seconds(), 0.0)

    async def promote_scheduled_jobs(self) -> int:
        now = self._now()
        due = [j for j in self._jobs.values() if j.status is SCHEDULED and j.scheduled_at <= now]
        for job in due:
            self._transition(job, PENDING)
        if due:
            self._wake()
        return len(due)

    async def fail_overdue_jobs(self) -> int:
        now = self._now()
        late = [
            job
            for job in self._jobs.values()
            if job.status in (PENDING, SCHEDULED)
            and job.schedule_to_close is not None
            and job.schedule_to_close < now
        ]
        for job in late:
            self._transition(job, JobStatus.FAILED)
            job.set_error(_DEADLINE_PASSED)
        return len(late)

    async def reclaim_expired_leases(
        self,
        cancel_grace: timedelta,
        cleanup_grace: timedelta,
        *,
        poison_reclaims: int | None = DEFAULT_POISON_RECLAIMS,
    ) -> int:
        # Each settled as ``settle.reclaim`` decides, with one 'reclaim' event.
        now = self._now()
        cancel_headroom = cancel_grace + cleanup_grace + CANCEL_RECLAIM_HEADROOM
        expired = [
            job
            for job in self._jobs.values()
            if job.status is RUNNING
            and job.lock_expires_at is not None
            and job.lock_expires_at + (cancel_headroom if job.cancel_requested_at else _ZERO) < now
            and not self._settling(job.id)  # PG: FOR UPDATE SKIP LOCKED
        ]
        blamed = {job.id for job in expired if is_blamed(self, job)}  # before any write, as PG
        for job in expired:
            reclaim(self, job, now, poison_reclaims, blamed=job.id in blamed)
        if expired:
            self._wake()
        return len(expired)

    async def expire_results(
        self, batch_size: int = 10_000, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        # Oldest expiry first, yielding between batches as commits do.
        def clear_batch() -> int:
            now = self._now()
            due = sorted(
                (
                    job
                    for job in self._jobs.values()
                    if job.result_expires_at is not None
                    and job.result_expires_at < now
                    and not self._settling(job.id)  # PG: FOR UPDATE SKIP LOCKED
                    and not self._in_running_workflow(job)
                ),
                key=lambda job: (job.result_expires_at, job.id),
            )[:batch_size]
            for job in due:
                job.result = job.result_expires_at = None
                job.updated_at = now
            return len(due)

        return await in_batches(batch_size, clear_batch, on_batch)

    def _in_running_workflow(self, job: JobRecord) -> bool:
        """A step of a running workflow: its result stays for the steps after it."""
        workflow_id = workflow_id_of(job.metadata)
        workflow = None if workflow_id is None else self._workflows.get(workflow_id)
        return workflow is not None and workflow.status is WorkflowStatus.RUNNING

    async def vacuum_jobs(self, min_dead: int, dead_fraction: float) -> bool:
        # Dicts leave no dead row versions behind: nothing to vacuum.
        return False

    async def delete_stale_workers(self, older_than: timedelta, batch_size: int = 1_000) -> int:
        # Oldest first; nothing else needs the row (sql/maintenance.sql).
        derived.check_stale_age(older_than)
        _check_batch_size(batch_size)

        def take() -> int:
            cutoff = self._now() - older_than
            holding = {job.locked_by_worker for job in self._jobs.values() if job.status is RUNNING}
            stale = sorted(
                (
                    worker
                    for worker in self._workers.values()
                    if worker.last_seen_at < cutoff and worker.info.id not in holding
                ),
                key=lambda worker: (worker.last_seen_at, worker.info.id),
            )[:batch_size]
            for worker in stale:
                del self._workers[worker.info.id]
            return len(stale)

        return await in_batches(batch_size, take)

    async def list_waiting_queues(self) -> list[str]:
        return sorted({job.queue for job in self._jobs.values() if job.status is PENDING})

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        visibility_delay = derived.reclaim_visibility_delay(visibility_delay)
        horizon = self._now() - visibility_delay
        found = [
            freeze(e, EventRow)
            for e in self._events
            if e.kind == "reclaim" and e.id > after_id and e.occurred_at <= horizon
        ]
        return found[: max(limit, 0)]

    async def get_latest_reclaim_event_id(self) -> int:
        return max((e.id for e in self._events if e.kind == "reclaim"), default=0)
