"""The in-memory backend's state: the stored records (jobs, workers, actor configs, queues, the
archive, batches), the shared helpers every part writes through (events, attempts, the lease
fence, the job filter), and the handle of a simulated transaction.

Records are mutable dataclasses mirroring the schema's rows; callers only ever get frozen
snapshots of them (jsonb.py), whose JSON columns round-trip through ``json`` as jsonb would.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from taskq_core.backend.protocol import (
    ActorConfigRow,
    AttemptRow,
    ErrorInfo,
    EventRow,
    JobRow,
    JobSummary,
    LeaderRow,
    Lease,
    QueueMode,
    RetryKind,
    ScheduledAnnouncements,
    WorkerInfo,
)
from taskq_core.backend.protocol.admin import Audit, OperatorLogEntry
from taskq_core.backend.protocol.batches import BatchRow, BatchStatus
from taskq_core.backend.protocol.workflows import WorkflowStatus
from taskq_core.clock import Clock, SystemClock
from taskq_core.constants import DEFAULT_MAX_PAYLOAD_BYTES
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus, assert_valid_transition

from .jsonb import as_json, freeze

if TYPE_CHECKING:
    pass

PENDING, SCHEDULED, RUNNING = JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING
WAITING = JobStatus.WAITING
# The cohort of the jobs without a fairness_key (COALESCE(fairness_key, '__null__') in SQL):
# a literal '__null__' key joins it, as it does on PostgreSQL.
NULL_COHORT = "__null__"


# --- stored records --------------------------------------------------------------------------
# Alike worker/deps.py's WorkerDeps by shape only: typed dataclass fields, other data.
@dataclass(slots=True)
class JobRecord:
    """A mutable ``jobs`` row: JobRow's fields, defaulted as the schema defaults them."""

    id: UUID
    actor: str
    queue: str
    payload: dict[str, Any]
    status: JobStatus
    priority: int
    scheduled_at: datetime
    created_at: datetime
    updated_at: datetime
    retry_kind: RetryKind
    max_attempts: int
    identity_key: str | None
    fairness_key: str | None
    schedule_to_close: datetime | None
    result_ttl: timedelta | None
    metadata: dict[str, Any]
    trace_id: str | None
    span_id: str | None
    attempt: int = 0
    locked_by_worker: UUID | None = None
    lock_expires_at: datetime | None = None
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_phase: int = 0
    cancel_requested_at: datetime | None = None
    cancel_reason: str | None = None
    result: Any = None
    result_expires_at: datetime | None = None
    error_class: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    progress_seq: int = 0
    progress_state: dict[str, Any] | None = None
    unique_key: str | None = None
    unique_until: datetime | None = None
    unstarted_reclaims: int = 0
    uncounted_attempts: int = 0

    @property
    def attempts_used(self) -> int:
        """Attempts that counted against ``max_attempts`` (as ``JobRow.attempts_used``)."""
        return self.attempt - self.uncounted_attempts

    def snapshot(self) -> JobRow:
        """A frozen copy that shares nothing mutable with this record."""
        return freeze(self, JobRow)

    def summary(self) -> JobSummary:
        """A frozen copy of every field but the payload, the result and the traceback (what
        listings read)."""
        return freeze(self, JobSummary)

    @property
    def cohort(self) -> str:
        """The job's fairness cohort: its fairness_key, or the one cohort of the NULL keys."""
        return NULL_COHORT if self.fairness_key is None else self.fairness_key

    def clear_lock(self) -> None:
        """Forget the worker lease (the row is no longer running)."""
        self.locked_by_worker = None
        self.lock_expires_at = None

    def clear_cancel(self) -> None:
        """Forget any cancel request (a fresh attempt starts without one)."""
        self.cancel_phase = 0
        self.cancel_requested_at = None
        self.cancel_reason = None

    def set_error(self, error: ErrorInfo | None) -> None:
        """Record (or, with None, clear) the last error on the row."""
        if error is None:
            self.error_class = self.error_message = self.error_traceback = None
        else:
            self.error_class, self.error_message = error.error_class, error.message
            self.error_traceback = error.traceback


@dataclass(slots=True)
class WorkerRecord:
    """A mutable ``workers`` row."""

    info: WorkerInfo
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None = None
    status: str = "running"
    exit_code: int | None = None
    exit_signal: str | None = None
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None


@dataclass(slots=True)
class ActorConfigRecord:
    """A mutable ``actor_config`` row: ActorConfigRow's fields, repeated on purpose (a frozen
    row cannot be updated in place; ``freeze`` copies them by name)."""

    actor: str
    queue: str
    metadata: dict[str, Any]
    max_concurrent: int | None
    max_pending: int | None
    result_ttl: timedelta | None
    created_at: datetime
    updated_at: datetime
    retry_kind: RetryKind | None = None
    max_attempts: int | None = None
    retry_time_budget: timedelta | None = None
    priority: int | None = None

    def snapshot(self) -> ActorConfigRow:
        """A frozen copy."""
        return freeze(self, ActorConfigRow)


@dataclass(slots=True)
class QueueRecord:
    """A mutable ``queues`` row; a queue without one has these defaults."""

    mode: QueueMode = "strict_fifo"
    max_concurrent: int | None = None
    paused: bool = False


@dataclass(slots=True)
class BatchRecord:
    """A mutable ``batches`` row; ``finalizer`` holds the finalizer's enqueue arguments (the
    ``finalizer`` jsonb column, as ``finalizer_to_json`` writes it)."""

    id: UUID
    queue: str
    status: BatchStatus
    expected_size: int
    failure_threshold: int | None
    finalizer: dict[str, Any] | None
    metadata: dict[str, Any]
    created_at: datetime
    consecutive_failures: int = 0
    finalizer_job_id: UUID | None = None
    completed_at: datetime | None = None
    outcomes_left: int = 0  # see BatchBackend.apply_batch_outcomes: it gates the hook's look

    def snapshot(self) -> BatchRow:
        """A frozen copy that shares nothing mutable with this record."""
        actor = None if self.finalizer is None else self.finalizer["actor"]
        return freeze(self, BatchRow, finalizer_actor=actor)


@dataclass(slots=True)
class WorkflowRecord:
    """A mutable ``workflows`` row."""

    id: UUID
    name: str | None
    metadata: dict[str, Any]
    created_at: datetime
    status: WorkflowStatus = WorkflowStatus.RUNNING
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None


@dataclass(slots=True)
class ArchivedRecord:
    """A ``jobs_archive`` row: the job's record as it was when pruned (detached from
    ``_jobs``, never written again) and when it was archived and leaves for good."""

    job: JobRecord
    archived_at: datetime
    expire_at: datetime


class MemoryTransaction:
    """The handle ``InMemoryBackend.transaction()`` yields; pass it as ``connection=``.

    Enqueues made through it are buffered and become visible only when the ``async with``
    block exits without an exception; an exception discards them, like a rolled-back COMMIT.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.backend = store
        self.open = True
        self.buffered: list[JobRecord] = []
        self.on_commit: list[Callable[[], object]] = []  # worker writes made through it
        # Jobs whose success this transaction will write: Postgres holds their rows locked
        # until it ends, so the sweeps that skip locked rows leave them alone meanwhile.
        self.settling: set[UUID] = set()
        # The unique keys of buffered jobs (as stored) and as their callers gave them.
        self.given_keys: dict[str, str] = {}
        # The batch rows created through it (they are written by ``on_commit``).
        self.batches: set[UUID] = set()


# --- the shared state ------------------------------------------------------------------------
class MemoryStore:
    """Every table as a dict, the injected clock, and the writes all parts share.

    Single-threaded by contract: one event loop, no sharing across threads, so a method that
    does not await is atomic, as one SQL statement is.
    """

    def __init__(
        self, *, clock: Clock | None = None, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self.max_payload_bytes = max_payload_bytes  # the largest payload an enqueue accepts
        self._jobs: dict[UUID, JobRecord] = {}
        self._attempts: dict[UUID, list[AttemptRow]] = {}
        self._events: list[EventRow] = []
        # The archive (the prune moves jobs here, the archive expiry deletes them): job id to
        # its archived row, and to its archived attempts (oldest first).
        self._archived_jobs: dict[UUID, ArchivedRecord] = {}
        self._archived_attempts: dict[UUID, list[AttemptRow]] = {}
        self._workers: dict[UUID, WorkerRecord] = {}
        self._leader: LeaderRow | None = None
        self._sweep_locks: set[str] = set()  # sweep_lock names held right now
        self._actor_configs: dict[str, ActorConfigRecord] = {}
        self._queues: dict[str, QueueRecord] = {}
        self._wake_subscribers: set[asyncio.Event] = set()
        self._cancel_subscribers: set[asyncio.Event] = set()
        self._scheduled_subscribers: set[ScheduledAnnouncements] = set()
        self._event_ids = itertools.count(1)
        self._attempt_ids = itertools.count(1)
        self._open_transactions: set[MemoryTransaction] = set()
        self._operator_log: list[OperatorLogEntry] = []
        self._operator_log_ids = itertools.count(1)
        self._batches: dict[UUID, BatchRecord] = {}
        self._workflows: dict[UUID, WorkflowRecord] = {}
        # workflow_edges both ways: a step's dependencies, and the steps that wait on a job.
        self._dependencies: dict[UUID, list[UUID]] = {}
        self._dependents: dict[UUID, list[UUID]] = {}
        self._parents_left: dict[UUID, int] = {}  # workflow_waits: the release's gate

    async def close(self) -> None:
        """Nothing to release; idempotent."""

    @property
    def clock(self) -> Clock:
        """The clock every time predicate of this backend reads."""
        return self._clock

    def _now(self) -> datetime:
        return self._clock.now()

    def _log_operator(
        self, action: str, target: str | None, audit: Audit, detail: dict[str, Any]
    ) -> None:
        """One operator_log row: who did ``action`` to ``target``, why, and what changed."""
        self._operator_log.append(
            OperatorLogEntry(
                id=next(self._operator_log_ids),
                occurred_at=self._now(),
                action=action,
                target=target,
                by=audit.by,
                reason=audit.reason,
                detail=as_json(detail),
            )
        )

    def _queue_row(self, name: str) -> QueueRecord:
        """The queue's settings: its row, or the defaults of a queue without one."""
        return self._queues.get(name) or QueueRecord()

    # --- history rows ------------------------------------------------------------------------
    def _record_event(
        self,
        job: JobRecord,
        kind: str,
        from_status: JobStatus | None,
        to_status: JobStatus | None,
        worker_id: UUID | None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Append one ``job_events`` row at the clock's now (a success's is read from the job
        row instead: protocol.history)."""
        if to_status is JobStatus.SUCCEEDED:
            return
        event = EventRow(
            id=next(self._event_ids),
            job_id=job.id,
            occurred_at=self._now(),
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            worker_id=worker_id,
            detail=as_json(detail or {}),
        )
        self._events.append(event)

    def _transition(
        self,
        job: JobRecord,
        to_status: JobStatus,
        *,
        worker_id: UUID | None = None,
        checked: bool = True,
        kind: str = "state_change",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Move ``job`` to ``to_status`` and write its event (a state_change unless ``kind``).

        ``checked=False`` is for operator retry, which re-pends terminal rows on purpose.
        """
        from_status = job.status
        if checked:
            assert_valid_transition(from_status, to_status, job.id)
        job.status = to_status
        job.updated_at = self._now()
        if to_status in TERMINAL_STATUSES:
            job.finished_at = job.updated_at
        self._record_event(job, kind, from_status, to_status, worker_id, detail)

    def _record_attempt(
        self, job: JobRecord, outcome: str, worker_id: UUID | None, error: ErrorInfo | None
    ) -> None:
        """Append one ``job_attempts`` row for the job's current attempt, ending now (a
        success's is read from the job row instead: protocol.history)."""
        if outcome == "succeeded":
            return
        self._add_attempt_row(
            job.id,
            job.attempt,
            worker_id,
            outcome,
            started_at=job.started_at,
            finished_at=self._now(),
            error=error,
        )

    def _add_attempt_row(
        self,
        job_id: UUID,
        attempt: int,
        worker_id: UUID | None,
        outcome: str,
        *,
        started_at: datetime | None,
        finished_at: datetime,
        error: ErrorInfo | None,
    ) -> None:
        duration = None
        if started_at is not None:
            duration = max((finished_at - started_at).total_seconds(), 0.0) * 1000.0
        # Alike postgres/core.py's connect (keywords handed to __init__) by shape only.
        self._attempts.setdefault(job_id, []).append(
            AttemptRow(
                id=next(self._attempt_ids),
                job_id=job_id,
                attempt=attempt,
                worker_id=worker_id,
                outcome=outcome,
                started_at=started_at,
                finished_at=finished_at,
                duration_ms=duration,
                error_class=error.error_class if error else None,
                error_message=error.message if error else None,
                error_traceback=error.traceback if error else None,
            )
        )

    def _has_attempt(self, job_id: UUID, attempt: int) -> bool:
        """Whether the job has an attempt row for ``attempt``."""
        return any(row.attempt == attempt for row in self._attempts.get(job_id, ()))

    def _drop(self, ids: Collection[UUID]) -> None:
        """Delete jobs with their attempts and events (PostgreSQL's ON DELETE CASCADE)."""
        for job_id in ids:
            del self._jobs[job_id]
            self._attempts.pop(job_id, None)
        gone = set(ids)
        self._events = [event for event in self._events if event.job_id not in gone]

    # --- shared predicates -------------------------------------------------------------------
    def _leased(self, lease: Lease) -> JobRecord | None:
        """The fence of every worker write: running, locked by the lease's worker, at its
        attempt."""
        job = self._jobs.get(lease.job_id)
        if (
            job is None
            or job.status is not RUNNING
            or job.locked_by_worker != lease.worker_id
            or job.attempt != lease.attempt
        ):
            return None
        return job

    def _settling(self, job_id: UUID) -> bool:
        """Whether an open transaction will write this job's success (PG: its row is locked,
        so the statements that skip locked rows leave it alone)."""
        return any(job_id in handle.settling for handle in self._open_transactions)

    def _transaction_handle(self, connection: Any) -> MemoryTransaction:
        """``connection`` as an open handle of this backend's ``transaction()``, or raise."""
        if not isinstance(connection, MemoryTransaction):
            raise TypeError(
                "InMemoryBackend: connection= must be a handle from this backend's "
                f"transaction(), got {type(connection).__name__}"
            )
        if connection.backend is not self:
            raise ValueError("InMemoryBackend: the transaction handle belongs to another backend")
        if not connection.open:
            raise ValueError("InMemoryBackend: the transaction handle is already closed")
        return connection

    # --- wake-ups (the twin of NOTIFY; subscriptions live in ``notify``) ---------------------
    def _wake(self) -> None:
        """Tell every wake subscriber that dispatchable work may exist."""
        for event in self._wake_subscribers:
            event.set()

    def _announce_scheduled(self, jobs: Iterable[JobRecord]) -> None:
        """Tell every scheduled subscriber how soon the earliest of ``jobs`` that waits for a
        time is due (the twin of the events NOTIFY of the enqueue and settle statements)."""
        if not self._scheduled_subscribers:
            return
        now = self._now()
        waits = [(j.scheduled_at - now).total_seconds() for j in jobs if j.status is SCHEDULED]
        if waits:
            for subscriber in self._scheduled_subscribers:
                subscriber.announce(min(waits))

    def _wake_cancel(self) -> None:
        """Tell every cancel subscriber that a running job was asked to cancel."""
        for event in self._cancel_subscribers:
            event.set()
