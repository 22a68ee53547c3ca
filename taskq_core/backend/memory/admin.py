"""Operator writes and settings: cancel requests and operator retries (one job or many), an
operator's requeue, fail, move and purge, the worker rows, actor configs (code-declared vs
operator-owned capacity), queue settings, and who did each (audit stamps, the operator log).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

# Names postgres/registry.py imports too, on purpose: both implement protocol.admin.
from taskq_core.backend.protocol import (
    UNSET,
    ActorConfigDrift,
    ActorConfigRow,
    ActorConfigSyncResult,
    ActorDeclaration,
    BulkCancelResult,
    CancelOutcome,
    JobFilter,
    QueueMode,
    QueueRow,
    ReadStaleness,
    WorkerInfo,
    WorkerRow,
    check_capacity,
    check_queue_update,
)
from taskq_core.backend.protocol.admin import (
    MOVABLE_STATUSES,
    PURGEABLE_STATUSES,
    Audit,
    ForcedEnd,
    ForcedEndResult,
    OperatorLogEntry,
    PurgeResult,
    QueuePause,
)
from taskq_core.backend.protocol.admin_rules import (
    acknowledgement_detail,
    capacity_changes,
    filter_document,
    forced_end_error,
    queue_changes,
)
from taskq_core.backend.protocol.values import ErrorInfo, Lease
from taskq_core.statemachine import (
    ACTIVE_STATUSES,
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    assert_valid_transition,
)

from .jsonb import as_json, freeze
from .lookups import matching, unique_holder
from .settle import Ending, counts_as_started, plan_ending, settle_ending, write_settlement
from .store import (
    PENDING,
    RUNNING,
    ActorConfigRecord,
    JobRecord,
    MemoryStore,
    QueueRecord,
    WorkerRecord,
)


# Alike explain/ended.py's _outcome_facts by shape only: a dict of named fields, other data.
def _policy(decl: ActorDeclaration) -> dict[str, Any]:
    """The code-owned columns of a declaration: its retry policy and priority."""
    return {
        "retry_kind": decl.retry_kind,
        "max_attempts": decl.max_attempts,
        "retry_time_budget": decl.retry_time_budget,
        "priority": decl.priority,
    }


def request_cancel(store: MemoryStore, job: JobRecord, reason: str | None) -> CancelOutcome:
    """One cancel request: a waiting job ends cancelled at once; a running one gets
    cancel_phase 1 and its worker hears of it (cancel wake, heartbeat flags). Either
    way one ``cancel_request`` event, and the request's time and reason on the row."""
    if job.status in TERMINAL_STATUSES:
        return "terminal"
    if job.status is RUNNING and job.cancel_requested_at is not None:
        return "already_requested"
    now = store._now()
    job.cancel_requested_at = now
    job.cancel_reason = reason
    job.updated_at = now
    from_status = job.status
    if from_status is RUNNING:
        job.cancel_phase = 1
        detail = {"reason": reason, "cancel_phase": 1}
        store._record_event(job, "cancel_request", RUNNING, RUNNING, None, detail)
        store._wake_cancel()
        return "requested"
    assert_valid_transition(from_status, JobStatus.CANCELLED, job.id)
    job.status = JobStatus.CANCELLED
    job.finished_at = now
    store._record_event(job, "cancel_request", from_status, job.status, None, {"reason": reason})
    return "cancelled"


def reset_for_retry(store: MemoryStore, job: JobRecord, status: JobStatus, reason: str) -> None:
    """A failed, crashed or cancelled job to ``status`` as if new: attempt budget,
    result, error, lock and cancel fields reset (a workflow's retry waits again)."""
    # Unchecked: moving a terminal row on is the operator's explicit override.
    store._transition(job, status, checked=False, detail={"reason": reason})
    job.scheduled_at = job.updated_at
    job.uncounted_attempts = job.attempt  # a fresh budget; the next body's number is higher
    job.finished_at = job.started_at = None
    job.result = job.result_expires_at = None
    job.clear_lock()
    job.clear_cancel()
    job.set_error(None)


# Mirrors postgres/admin.py and postgres/registry.py on purpose: both implement protocol.admin, so
# each method restates its signature (mypy checks the match).
class AdminPart(MemoryStore):
    """Cancel and retry requests, worker rows, actor configs and queues."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The pause note of each paused queue that has one (the queues row's paused_* columns).
        self._queue_pauses: dict[str, QueuePause] = {}

    # --- audit -------------------------------------------------------------------------------
    @contextmanager
    def _audited(self, audit: Audit | None, **detail: Any) -> Iterator[None]:
        """The events written inside the block gain ``audit`` (and ``detail``) in their
        detail, as the Postgres backend stamps the events of an audited transaction."""
        since = len(self._events)
        yield
        stamp = {**detail, **(audit.detail() if audit is not None else {})}
        if stamp:
            for index in range(since, len(self._events)):
                event = self._events[index]
                self._events[index] = replace(event, detail={**event.detail, **stamp})

    async def list_operator_log(
        self, *, action: str | None = None, target: str | None = None, limit: int = 100
    ) -> list[OperatorLogEntry]:
        found = [
            entry
            for entry in reversed(self._operator_log)
            if (target is None or entry.target == target)
            and (action is None or entry.action == action)
        ]
        return found[:limit]

    # --- cancel and retry --------------------------------------------------------------------
    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        job = self._jobs.get(job_id)
        return "not_found" if job is None else request_cancel(self, job, reason)

    async def cancel_where(
        self, filter: JobFilter, reason: str | None, *, audit: Audit | None = None
    ) -> BulkCancelResult:
        with self._audited(audit):
            outcomes = Counter(
                request_cancel(self, job, reason) for job in matching(self, filter, ACTIVE_STATUSES)
            )
        return BulkCancelResult(cancelled=outcomes["cancelled"], requested=outcomes["requested"])

    def _retry(self, job: JobRecord) -> bool:
        """An operator retry: a failed, crashed or cancelled job back to pending as if new
        (attempt budget, result, error, lock and cancel fields reset); False otherwise, and
        when another job holds its unique key (one without a window) now."""
        if job.status not in RETRYABLE_STATUSES:
            return False
        key = job.unique_key
        if key is not None and job.unique_until is None and unique_holder(self, key) is not None:
            return False
        reset_for_retry(self, job, PENDING, "operator_retry")
        return True

    async def retry_job(self, job_id: UUID) -> bool:
        job = self._jobs.get(job_id)
        retried = job is not None and self._retry(job)
        if retried:
            self._wake()
        return retried

    async def retry_where(self, filter: JobFilter, *, audit: Audit | None = None) -> int:
        with self._audited(audit):
            count = sum(self._retry(job) for job in matching(self, filter, RETRYABLE_STATUSES))
        if count:
            self._wake()
        return count

    # --- stuck work --------------------------------------------------------------------------
    async def end_running_job(self, job_id: UUID, end: ForcedEnd, audit: Audit) -> ForcedEndResult:
        # By the settle functions, the requeue as the reclaim sweep writes it.
        job = self._jobs.get(job_id)
        if job is None or job.status is not RUNNING or job.locked_by_worker is None:
            return ForcedEndResult(None if job is None else job.snapshot(), settled=False)
        error = ErrorInfo(*forced_end_error(end, audit))
        worker_id = job.locked_by_worker
        if end == "fail":
            with self._audited(audit, reason="operator_fail"):
                # As mark_failed_or_retry without a delay: fenced by the lease read above.
                leased = self._leased(Lease(job.id, worker_id, job.attempt))
                if leased is not None:
                    settle_ending(self, leased, worker_id, Ending("failed", error))
            return ForcedEndResult(job.snapshot(), leased is not None)
        # A reclaim, as the sweep makes it (settle.reclaim) with the operator's error.
        started = counts_as_started(job)
        ending = Ending("crashed", error, self._now(), started=started, retry_as=PENDING)
        plan = plan_ending(self, job, ending)
        detail = {
            "from_state": RUNNING.value,
            "to_state": plan.status.value,
            "reason": "operator_requeue",
            "worker_id": str(worker_id),
            "started": started,
        }
        with self._audited(audit):
            write_settlement(self, job, worker_id, plan, kind="reclaim", detail=detail)
        self._wake()
        return ForcedEndResult(job.snapshot(), settled=True)

    async def move_where(self, filter: JobFilter, to_queue: str, audit: Audit) -> int:
        # Place in time kept; one ``queue_move`` event each.
        moved = [job for job in matching(self, filter, MOVABLE_STATUSES) if job.queue != to_queue]
        now = self._now()
        with self._audited(audit):
            for job in moved:
                detail = {"from_queue": job.queue, "to_queue": to_queue}
                job.queue, job.updated_at = to_queue, now
                self._record_event(job, "queue_move", job.status, job.status, None, detail)
        if any(job.status is PENDING for job in moved):
            self._wake()
        return len(moved)

    async def purge_where(self, filter: JobFilter, audit: Audit) -> PurgeResult:
        # The jobs' attempts and events go with them; one operator log entry.
        matched = matching(self, filter, frozenset(JobStatus))
        doomed = [job for job in matched if job.status in PURGEABLE_STATUSES]
        counts = Counter(job.status for job in doomed)
        self._drop([job.id for job in doomed])
        deleted = {status: counts[status] for status in JobStatus if counts[status]}
        skipped = len(matched) - len(doomed)
        detail = {
            "filter": filter_document(filter),
            "deleted": {status.value: n for status, n in deleted.items()},
            "running_skipped": skipped,
        }
        self._log_operator("purge", None, audit, detail)
        return PurgeResult(deleted=deleted, running_skipped=skipped)

    # --- workers -----------------------------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> None:
        now = self._now()
        info = replace(info, queues=list(info.queues), actors=list(info.actors))
        existing = self._workers.get(info.id)
        started_at = now if existing is None else existing.started_at
        self._workers[info.id] = WorkerRecord(info, started_at=started_at, last_seen_at=now)

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.status, worker.stopped_at = "stopped", self._now()

    async def mark_worker_exited(
        self, worker_id: UUID, exit_code: int | None, exit_signal: str | None
    ) -> bool:
        worker = self._workers.get(worker_id)
        if worker is None:
            return False
        worker.status, worker.stopped_at = "stopped", worker.stopped_at or self._now()
        worker.exit_code, worker.exit_signal = exit_code, exit_signal
        return True

    async def mark_worker_acknowledged(
        self, worker_id: UUID, last_seen_at: datetime, audit: Audit
    ) -> bool:
        worker = self._workers.get(worker_id)
        if worker is None or worker.status != "running" or worker.last_seen_at != last_seen_at:
            return False
        worker.acknowledged_at, worker.acknowledged_by = self._now(), audit.by
        self._log_operator(
            "worker_ack", str(worker_id), audit, acknowledgement_detail(last_seen_at)
        )
        return True

    async def get_read_staleness(self) -> ReadStaleness | None:
        return None  # nothing replicates a process's memory

    async def list_workers(self) -> list[WorkerRow]:
        running: Counter[UUID | None] = Counter()
        claimed: Counter[UUID | None] = Counter()
        for job in self._jobs.values():  # a claimed job waits for a consumer: not running yet
            if job.status is RUNNING:
                (running if job.started_at is not None else claimed)[job.locked_by_worker] += 1
        leader_id = None if self._leader is None else self._leader.worker_id
        workers = sorted(
            self._workers.values(), key=lambda w: (w.last_seen_at, w.info.id), reverse=True
        )
        return [
            freeze(
                w.info,
                WorkerRow,
                started_at=w.started_at,
                last_seen_at=w.last_seen_at,
                stopped_at=w.stopped_at,
                status=w.status,
                is_leader=w.info.id == leader_id,
                running_jobs=running[w.info.id],
                claimed_jobs=claimed[w.info.id],
                exit_code=w.exit_code,
                exit_signal=w.exit_signal,
                acknowledged_at=w.acknowledged_at,
                acknowledged_by=w.acknowledged_by,
                queues=list(w.info.queues),
                actors=list(w.info.actors),
            )
            for w in workers
        ]

    # --- actor config ------------------------------------------------------------------------
    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        # All or nothing, like PG's one transaction.
        now = self._now()
        created: list[str] = []
        overrides: list[tuple[str, str, Any, Any]] = []
        drift: list[ActorConfigDrift] = []
        additions: dict[str, ActorConfigRecord] = {}
        existing: list[tuple[ActorDeclaration, ActorConfigRecord]] = []
        for decl in declared:
            metadata = as_json(decl.metadata)  # validate before anything is stored
            row = self._actor_configs.get(decl.actor) or additions.get(decl.actor)
            if row is None:
                additions[decl.actor] = ActorConfigRecord(
                    decl.actor,
                    decl.queue,
                    metadata,
                    decl.max_concurrent,
                    decl.max_pending,
                    decl.result_ttl,
                    created_at=now,
                    updated_at=now,
                    **_policy(decl),
                )
                created.append(decl.actor)
                continue
            if decl.actor not in additions:  # a row made by this sync already has its policy
                existing.append((decl, row))
            # Capacity is operator-owned: a difference is reported, never written.
            for name in ("max_concurrent", "max_pending", "result_ttl"):
                stored, wanted = getattr(row, name), getattr(decl, name)
                if stored != wanted:
                    overrides.append((decl.actor, name, stored, wanted))
            if row.queue != decl.queue:
                drift.append(ActorConfigDrift(decl.actor, "queue", row.queue, decl.queue))
            if row.metadata != metadata:
                drift.append(
                    ActorConfigDrift(decl.actor, "metadata", as_json(row.metadata), metadata)
                )
        self._actor_configs.update(additions)  # only now: a bad declaration stored nothing
        if force:
            for item in drift:
                row = self._actor_configs[item.actor]
                setattr(row, item.field, as_json(item.declared))
                row.updated_at = now
        if force or not drift:  # the code owns the policy, unless drift refuses this start
            for decl, row in existing:
                policy = _policy(decl)
                if any(getattr(row, name) != value for name, value in policy.items()):
                    for name, value in policy.items():
                        setattr(row, name, value)
                    row.updated_at = now
        return ActorConfigSyncResult(created, overrides, drift, overwritten=force and bool(drift))

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        return [self._actor_configs[name].snapshot() for name in sorted(self._actor_configs)]

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        row = self._actor_configs.get(actor)
        return None if row is None else row.snapshot()

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        return {name: row.max_pending for name, row in self._actor_configs.items()}

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
        audit: Audit | None = None,
    ) -> ActorConfigRow | None:
        check_capacity(max_concurrent=max_concurrent, max_pending=max_pending)
        row = self._actor_configs.get(actor)
        if row is None:
            return None
        before = row.snapshot()
        if max_concurrent is not UNSET:
            row.max_concurrent = max_concurrent
        if max_pending is not UNSET:
            row.max_pending = max_pending
        if result_ttl is not UNSET:
            row.result_ttl = result_ttl
        row.updated_at = self._now()
        self._wake()  # a raised cap can make waiting jobs dispatchable
        after = row.snapshot()
        if audit is not None:
            changed = capacity_changes(before, after)
            self._log_operator("actor_config_set", actor, audit, {"changed": changed})
        return after

    # --- queues ------------------------------------------------------------------------------
    def _queue_snapshot(self, name: str) -> QueueRow | None:
        """The queue as operators see it; None when it has neither jobs nor a row."""
        counts = Counter(job.status for job in self._jobs.values() if job.queue == name)
        claimed = sum(
            1
            for job in self._jobs.values()
            if job.queue == name and job.status is JobStatus.RUNNING and job.started_at is None
        )
        row = self._queues.get(name)
        if row is None and not counts:
            return None
        settings = row or QueueRecord()
        ordered = {status: counts[status] for status in JobStatus if counts[status]}
        return QueueRow(
            name=name,
            mode=settings.mode,
            max_concurrent=settings.max_concurrent,
            paused=settings.paused,
            has_row=row is not None,
            counts=ordered,
            pause=self._queue_pauses.get(name) if settings.paused else None,
            claimed=claimed,
        )

    async def list_queues(self) -> list[QueueRow]:
        names = sorted({job.queue for job in self._jobs.values()} | set(self._queues))
        return [row for name in names if (row := self._queue_snapshot(name)) is not None]

    async def get_queue(self, name: str) -> QueueRow | None:
        return self._queue_snapshot(name)

    async def update_queue(
        self,
        name: str,
        *,
        mode: QueueMode = UNSET,
        max_concurrent: int | None = UNSET,
        paused: bool = UNSET,
        paused_by: str | None = None,
        pause_reason: str | None = None,
        audit: Audit | None = None,
    ) -> QueueRow:
        check_queue_update(mode, max_concurrent)
        before = self._queue_snapshot(name)
        row = self._queues.setdefault(name, QueueRecord())
        if mode is not UNSET:
            row.mode = mode
        if max_concurrent is not UNSET:
            row.max_concurrent = max_concurrent
        if paused is not UNSET:
            row.paused = bool(paused)
            if row.paused:
                self._queue_pauses[name] = QueuePause(self._now(), paused_by, pause_reason)
            else:
                self._queue_pauses.pop(name, None)
        self._wake()  # a resumed queue or a raised cap can make waiting jobs dispatchable
        snapshot = self._queue_snapshot(name)
        assert snapshot is not None  # the row exists now
        if audit is not None:
            changed = queue_changes(before, snapshot)
            self._log_operator("queue_update", name, audit, {"changed": changed})
        return snapshot
