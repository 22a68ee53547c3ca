"""The Backend protocol: the one seam between TaskQ and its storage, and the types it speaks.

Worker, client, CLI and TUI talk only to this protocol. PostgresBackend implements it with
asyncpg (every time predicate on the database clock); InMemoryBackend implements it with dicts
and an injected Clock. Both pass the conformance suite in ``tests/conformance``.

Bump BACKEND_PROTOCOL_VERSION when an existing member's observable contract changes in a way an
old implementation would silently mishandle; both implementations assert it at import.
History: v2 fences every worker write by its Lease (worker and attempt), tells claimed jobs
(started_at NULL) from started ones, and renews only the leases a heartbeat names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus, parse_status

BACKEND_PROTOCOL_VERSION = 2

RetryKind = Literal["transient", "indefinite", "non_retryable"]
QueueMode = Literal["strict_fifo", "round_robin"]
SnoozeOutcome = Literal["scheduled", "cancelled", "failed", "noop"]
RetryAfterOutcome = Literal[
    "scheduled", "cancelled", "failed:DeadlineExceeded", "failed:MaxAttemptsExceeded", "noop"
]
CancelOutcome = Literal["cancelled", "requested", "already_requested", "terminal", "not_found"]


class _Unset:
    """Marker for 'leave this field as it is' in partial updates (None means 'clear')."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class EnqueueArgs:
    """Everything needed to insert one job. Relative times are resolved on the backend's clock.

    ``delay`` > 0 makes the job ``scheduled`` with ``scheduled_at = now() + delay``; otherwise it
    is ``pending`` with ``scheduled_at = now()``. ``schedule_to_close`` is a relative deadline
    from enqueue time (``jobs.schedule_to_close = now() + schedule_to_close``).
    """

    actor: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    delay: timedelta | None = None
    identity_key: str | None = None
    fairness_key: str | None = None
    schedule_to_close: timedelta | None = None
    retry_kind: RetryKind = "transient"
    max_attempts: int = 3
    result_ttl: timedelta | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    trace_id: str | None = None
    span_id: str | None = None
    job_id: UUID | None = None  # None: the backend assigns a UUIDv7


@dataclass(frozen=True, slots=True)
class JobRow:
    """A snapshot of one ``jobs`` row.

    ``lock_expires_at`` is set only while running. ``locked_by_worker`` is set while running,
    kept after the owning worker's own terminal write (who ran it last) and cleared when the
    job goes back to waiting (retry, snooze, reclaim, release, operator retry).
    ``claimed_at`` is when the last attempt was claimed; ``started_at`` when its body
    started: a running job whose ``started_at`` is None is claimed, waiting for a consumer.
    """

    id: UUID
    actor: str
    queue: str
    payload: dict[str, Any]
    status: JobStatus
    priority: int
    scheduled_at: datetime
    created_at: datetime
    retry_kind: RetryKind
    max_attempts: int
    attempt: int
    locked_by_worker: UUID | None
    lock_expires_at: datetime | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel_phase: int
    cancel_requested_at: datetime | None
    cancel_reason: str | None
    identity_key: str | None
    fairness_key: str | None
    schedule_to_close: datetime | None
    result: Any
    result_ttl: timedelta | None
    result_expires_at: datetime | None
    error_class: str | None
    error_message: str | None
    error_traceback: str | None
    metadata: dict[str, Any]
    trace_id: str | None
    span_id: str | None
    progress_seq: int
    progress_state: dict[str, Any] | None
    updated_at: datetime

    @property
    def is_terminal(self) -> bool:
        """Whether the job has finished for good."""
        return self.status in TERMINAL_STATUSES

    @property
    def is_claimed(self) -> bool:
        """Running in the database, but its body has not started: claimed ahead of a consumer."""
        return self.status is JobStatus.RUNNING and self.started_at is None

    def lease(self) -> Lease:
        """The lease of the running attempt this row shows (ValueError when not running)."""
        if self.status is not JobStatus.RUNNING or self.locked_by_worker is None:
            raise ValueError(f"job {self.id} is {self.status.value}, not running: no lease")
        return Lease(self.id, self.locked_by_worker, self.attempt)


@dataclass(frozen=True, slots=True)
class Lease:
    """One worker's claim on one attempt of a job. Every write a worker makes about a job it
    runs names its lease, and changes nothing unless the row is still running, locked by that
    worker, at that attempt: a reclaimed job, or a later attempt, is never settled by a
    worker that lost it (fencing)."""

    job_id: UUID
    worker_id: UUID
    attempt: int


_Row = TypeVar("_Row", "JobRow", "EnqueueArgs")
_SLOT_SETTERS: dict[type, tuple[Any, ...]] = {}  # per class: its fields' slot descriptors


def from_values(cls: type[_Row], values: Sequence[Any]) -> _Row:
    """An instance of a frozen, slotted dataclass from every field's value in declaration order.

    The values must already have the right types: no ``__init__`` runs. Backends and the client
    build one JobRow / EnqueueArgs per job of a batch, and the generated ``__init__`` (keyword
    arguments, one ``object.__setattr__`` per field) cost two to three times as much.
    """
    setters = _SLOT_SETTERS.get(cls)
    if setters is None:
        setters = _SLOT_SETTERS[cls] = tuple(getattr(cls, f.name).__set__ for f in fields(cls))
    row: _Row = object.__new__(cls)
    for set_field, value in zip(setters, values, strict=True):
        set_field(row, value)
    return row


@dataclass(frozen=True, slots=True)
class Start:
    """A claimed job's body started ``ran_for`` seconds ago, for ``mark_started_many``."""

    job_id: UUID
    attempt: int
    ran_for: float = 0.0


@dataclass(frozen=True, slots=True)
class Success:
    """One job's successful outcome, for ``mark_succeeded_many``.

    ``result_json`` is the result already encoded (``jsontext.encode``; None: no result):
    encoding happens once, where the result is made. ``ran_for`` is how long the body ran,
    which dates its start when that was not recorded yet.
    """

    job_id: UUID
    attempt: int
    result_json: str | None
    fallback_result_ttl: timedelta | None = None
    ran_for: float = 0.0


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What went wrong in an attempt."""

    error_class: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One execution attempt (``job_attempts``)."""

    id: int
    job_id: UUID
    attempt: int
    worker_id: UUID | None
    outcome: str  # succeeded|failed|retried|snoozed|retry_after|cancelled|crashed|abandoned
    started_at: datetime | None
    finished_at: datetime
    duration_ms: float | None
    error_class: str | None
    error_message: str | None
    error_traceback: str | None


@dataclass(frozen=True, slots=True)
class EventRow:
    """One audit event (``job_events``): a state change, a cancel request or a reclaim.

    Every status change writes exactly one event; creation (enqueue) writes none. Kinds:
    ``state_change`` (dispatch, terminal and rescheduling writes, sweeps, release, isolation,
    operator retry; also the cancel escalation 1 -> 2, as running -> running),
    ``cancel_request`` (pending/scheduled -> cancelled at once, or running -> running with
    cancel_phase 1) and ``reclaim`` (the expired-lock sweep; detail has from_state, to_state,
    reason='lock_expired' and worker_id).
    """

    id: int
    job_id: UUID
    occurred_at: datetime
    kind: str  # state_change | cancel_request | reclaim
    from_status: JobStatus | None
    to_status: JobStatus | None
    worker_id: UUID | None
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CancelFlag:
    """A running job of this worker whose cancel was requested."""

    job_id: UUID
    cancel_phase: int
    cancel_requested_at: datetime | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """What one heartbeat transaction did and saw.

    ``held``: the leases named that are still the worker's (any lease named but missing was
    refused: reclaimed, or a later attempt). ``extended``: those whose lease was renewed (a
    row being settled by another statement at that moment is held but not extended).
    """

    held: frozenset[UUID]
    extended: frozenset[UUID]
    cancel_flags: list[CancelFlag]

    @property
    def leases_extended(self) -> int:
        """How many leases were renewed."""
        return len(self.extended)


@dataclass(frozen=True, slots=True)
class BulkCancelResult:
    """Outcome of ``cancel_where``: cancelled at once vs. flagged for their running worker."""

    cancelled: int
    requested: int


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing or bulk operation targets.

    ``status`` is one status or a sequence (an empty sequence matches nothing); unknown names
    raise ValueError here, so both backends fail identically. ``active=True`` selects the
    non-terminal statuses, ``active=False`` the terminal ones; it excludes ``status``.
    Results are ordered newest first (``created_at DESC, id DESC``). ``limit`` applies to
    bulk operations too (``cancel_where``, ``retry_where`` act on the newest ``limit`` matches
    of the statuses they can act on); pass ``limit=None`` to act on every match.
    """

    status: JobStatus | str | Sequence[JobStatus | str] | None = None
    active: bool | None = None
    queue: str | None = None
    actor: str | None = None
    ids: Sequence[UUID] | None = None
    limit: int | None = 100

    def __post_init__(self) -> None:
        if self.status is not None and self.active is not None:
            raise ValueError("JobFilter: status and active are mutually exclusive")
        if self.limit is not None and self.limit < 0:
            raise ValueError("JobFilter: limit must not be negative")
        self.statuses()  # validates names

    def statuses(self) -> frozenset[JobStatus] | None:
        """The statuses this filter allows, or None for 'any status'."""
        if self.active is True:
            return frozenset(ACTIVE_STATUSES)
        if self.active is False:
            return frozenset(TERMINAL_STATUSES)
        if self.status is None:
            return None
        if isinstance(self.status, str):
            return frozenset({parse_status(self.status)})
        return frozenset(parse_status(str(s)) for s in self.status)


@dataclass(frozen=True, slots=True)
class QueueStatusCount:
    """Jobs of one status in one queue."""

    queue: str
    status: JobStatus
    count: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker registers at start."""

    id: UUID
    hostname: str
    pid: int
    queues: list[str]
    actors: list[str]
    concurrency: int
    label: str | None = None
    workgroup_instance: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A ``workers`` row, with leadership resolved."""

    id: UUID
    hostname: str
    pid: int
    label: str | None
    workgroup_instance: str | None
    queues: list[str]
    actors: list[str]
    concurrency: int
    version: str | None
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    status: str  # running | stopped
    is_leader: bool
    running_jobs: int  # jobs whose bodies run on it
    claimed_jobs: int = 0  # jobs it claimed ahead of a free consumer


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """The ``maintenance_leader`` row."""

    worker_id: UUID
    elected_at: datetime
    last_seen_at: datetime


@dataclass(frozen=True, slots=True)
class ActorDeclaration:
    """An actor as the code declares it, for ActorConfig sync."""

    actor: str
    queue: str
    metadata: dict[str, Any]
    max_concurrent: int | None
    max_pending: int | None
    result_ttl: timedelta | None


@dataclass(frozen=True, slots=True)
class ActorConfigRow:
    """An ``actor_config`` row (capacity fields are operator-owned)."""

    actor: str
    queue: str
    metadata: dict[str, Any]
    max_concurrent: int | None
    max_pending: int | None
    result_ttl: timedelta | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ActorConfigDrift:
    """One structural field that differs between the code and the stored row."""

    actor: str
    field: Literal["queue", "metadata"]
    stored: Any
    declared: Any


@dataclass(frozen=True, slots=True)
class ActorConfigSyncResult:
    """What ``sync_actor_configs`` did: rows created, capacity overrides seen, drift."""

    created: list[str]
    capacity_overrides: list[tuple[str, str, Any, Any]]  # actor, field, stored, declared
    drift: list[ActorConfigDrift]
    overwritten: bool  # drift was written over (force=True)


@dataclass(frozen=True, slots=True)
class DispatchPosition:
    """Where a job stands in its queue's dispatch order, read on the backend's clock.

    ``ahead`` counts the due pending jobs of the same queue that ``dispatch_batch`` orders
    before it (strict_fifo: priority DESC, scheduled_at, id; round_robin: rank inside each
    fairness cohort, priority DESC, the cohort served least recently, scheduled_at, id);
    ``ahead_other_cohorts`` is how many of them belong to other fairness cohorts (NULL keys
    form one cohort). Both are 0 unless the job is itself pending and due. ``now`` is the
    backend's clock at the read.
    """

    now: datetime
    mode: QueueMode
    ahead: int
    ahead_other_cohorts: int


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue as operators see it: its settings (defaults when no row) and job counts.

    ``counts`` holds only the statuses that have jobs, in JobStatus order.
    """

    name: str
    mode: QueueMode
    max_concurrent: int | None
    paused: bool
    has_row: bool
    counts: dict[JobStatus, int]


# The most rows ``list_recent_jobs`` returns: each status is read from its own index with
# this bound, so the plan stays an ordered index walk whatever the parameters.
RECENT_JOBS_MAX = 200


@dataclass(frozen=True, slots=True)
class QueueActivity:
    """One queue as the live dashboard shows it, read on the backend's clock.

    ``pending``, ``scheduled``, ``running`` (bodies running) and ``claimed`` (status running,
    not started yet) are exact counts. ``oldest_pending_at`` is the
    ``scheduled_at`` of the pending job that has been dispatchable longest (None when nothing
    is pending). ``finished`` counts the jobs per terminal status whose ``finished_at`` is
    inside the stats window (only statuses with jobs, in JobStatus order).
    ``finished_per_minute`` has one count of terminal jobs per minute, oldest first; the last
    covers the 60 seconds up to ``DashboardStats.now``. Settings default as in QueueRow.
    """

    name: str
    mode: QueueMode
    max_concurrent: int | None
    paused: bool
    pending: int
    scheduled: int
    running: int  # bodies running (started_at set)
    oldest_pending_at: datetime | None
    finished: dict[JobStatus, int]
    finished_per_minute: list[int]
    claimed: int = 0  # running in the database, claimed ahead of a consumer, not started


@dataclass(frozen=True, slots=True)
class DashboardStats:
    """Everything the dashboard's queue pane and header need, from one read.

    ``queues`` holds every queue that has jobs or a row in ``queues``, by name. ``now`` is
    the backend's clock at the read; ages and the per-minute buckets are relative to it.
    """

    now: datetime
    window: timedelta
    queues: list[QueueActivity]


@runtime_checkable
class Backend(Protocol):
    """Storage operations TaskQ needs. All times in predicates come from the backend's clock."""

    BACKEND_PROTOCOL_VERSION: ClassVar[int]
    supports_transactional_simulation: ClassVar[bool]

    async def close(self) -> None:
        """Release connections; idempotent."""

    # --- enqueue -------------------------------------------------------------------------
    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        """Insert one job and NOTIFY the wake channel when it is pending. No event is written:
        creation is not a transition.

        ``delay`` > 0 makes it scheduled. ``max_attempts`` < 1, an unknown ``retry_kind`` or a
        ``job_id`` that exists already raise ValueError. With ``connection`` (PG: any asyncpg
        connection, TaskQ's own from ``transaction()`` or the caller's, whatever its codecs;
        memory: a handle from ``transaction()``), the insert commits or rolls back with the
        caller, and so does its NOTIFY.
        """

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        """Insert all jobs atomically (PG: one COPY in one transaction), one row per item in
        order; one NOTIFY. A bad item inserts nothing."""

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        """Bulk insert (PG: COPY) returning the count; no rows returned; one NOTIFY."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A caller-owned transaction whose handle can be passed as ``connection=``."""

    # --- dispatch ------------------------------------------------------------------------
    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        """Atomically claim up to ``limit`` due pending jobs of ``queues``: -> running.

        Honours per-queue mode (strict_fifo / round_robin by fairness_key), paused queues,
        queue and actor ``max_concurrent`` (read every call), identity-key serialization.
        Sets attempt+1, locked_by_worker, lock_expires_at = now() + lock_lease and claimed_at,
        and clears started_at: the worker records the start when the body begins.

        Rows come back in dispatch order. strict_fifo: priority DESC, scheduled_at, id.
        round_robin: the same order inside each fairness_key cohort (NULL keys form one
        cohort), cohorts interleaved by their rank; among jobs of equal rank and priority
        the cohort whose last job was claimed least recently in that queue goes first (never
        claimed: first), so dispatching one job at a time still alternates cohorts. Queues
        of different modes are served mode group by mode group, in the order given. Only
        ``pending`` rows with scheduled_at <= now() are due (scheduled jobs wait for
        ``scheduled_to_pending``).
        An actor's ``max_concurrent`` counts its running jobs in every queue; a queue's counts
        running jobs in that queue; at most one job per (actor, identity_key) runs at a time.
        Concurrent dispatchers may exceed a cap by at most (dispatchers - 1) * cap.

        Candidates come from bounded windows of residual * oversample rows (the pipeline is
        spelled out in ``postgres/sql/dispatch.sql``): actors without a cap share one window
        per queue (at least 16 rows; round_robin: one per cohort), each capped actor has its
        own, so a capped backlog never blocks the others. A round_robin queue with more than
        128 cohorts is served from the shared window, ranked by cohort, to keep every call
        bounded.
        """

    async def release_leases(
        self,
        worker_id: UUID,
        leases: Sequence[Lease],
        *,
        reason: str,
        retry_delay: timedelta = timedelta(0),
        error: ErrorInfo | None = None,
    ) -> int:
        """Give back jobs this worker holds (a shutdown drain, a lost heartbeat): for each
        lease still the worker's, a job whose body never started (started_at None) -> pending
        in its place (scheduled_at kept) with its attempt given back and no attempt row; a
        started one gets a crashed attempt carrying ``error`` and -> scheduled at now() +
        ``retry_delay`` when retries are left (as in ``reclaim_expired_locks``), else
        crashed. A requested cancel ends either ``cancelled``. Each gets a state_change event
        (detail ``reason`` and ``started``); a wake when any went back to pending. Returns
        how many rows changed."""

    # --- heartbeat -----------------------------------------------------------------------
    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        """One transaction: touch the worker row, extend the named leases that are still this
        worker's (and nothing else it owns: a row it no longer holds is left to expire), its
        reservation leases, ping the leader row when leading, and read the cancel flags of the
        held jobs."""

    # --- terminal and rescheduling writes (fenced by the lease) -------------------------
    # Every write below changes nothing unless the row is running, locked by the lease's
    # worker, at the lease's attempt. A requested cancel wins over every rescheduling: a
    # retry, snooze, retry-after or release of a job asked to cancel ends it ``cancelled``.
    # ``ran_for`` (seconds the body ran; None: it never ran) dates started_at when the
    # worker's start mark was not written yet.
    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        """Record that these claimed jobs' bodies started (started_at = now() - ran_for) where
        the lease is still the worker's and no start is recorded; returns the ids written."""

    async def mark_succeeded(
        self,
        lease: Lease,
        result: Any,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """running -> succeeded with the result; False when the lease is not the row's any more.

        result_expires_at = finished_at + (actor_config.result_ttl, else the job's result_ttl,
        else ``fallback_result_ttl``; none of them: no expiry). A result that cannot be stored
        raises UnstorableValueError before anything is written.
        """

    async def mark_succeeded_many(self, worker_id: UUID, successes: Sequence[Success]) -> set[UUID]:
        """``mark_succeeded`` for many jobs in one statement (attempts and events included);
        returns the ids actually written (leases this worker lost are skipped). Result text
        that cannot be stored (not JSON, NaN, Infinity, a NUL) raises UnstorableValueError
        and writes nothing."""

    async def mark_succeeded_with_conn(
        self,
        connection: Any,
        lease: Lease,
        result_json: str | None,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """``mark_succeeded`` inside the caller's transaction (``connection``, a handle from
        ``transaction()``): the success commits or rolls back with the caller's own writes.

        Until the transaction ends the job's row is held (PG: locked): the reclaim sweep
        skips it and a heartbeat reports its lease held but not extended. True means the
        success is written when the transaction commits; settling the same lease again in
        that transaction returns False."""

    async def mark_failed_or_retry(
        self,
        lease: Lease,
        error: ErrorInfo,
        retry_delay: timedelta | None,
        *,
        ran_for: float | None = None,
    ) -> JobRow | None:
        """``retry_delay`` None: -> failed. Else -> scheduled at now() + delay (even a zero
        delay: the scheduled sweep promotes it), unless that passes schedule_to_close, then
        -> failed with error_class DeadlineExceeded, or a cancel was requested, then ->
        cancelled. None when the lease is not the row's.

        The attempt row keeps the actor's error (outcome ``failed`` or ``retried``); on a retry
        the job keeps it as its last error. The caller decides retry vs fail (attempt budget,
        retry kind); the backend decides only the deadline, on its own clock.
        """

    async def mark_cancelled(self, lease: Lease, *, ran_for: float | None = None) -> bool:
        """running -> cancelled (cooperative exit; a cancel request is not required)."""

    async def write_cancel_escalation(self, lease: Lease, *, reason: str = "requested") -> bool:
        """cancel_phase -> 2 (from 1 after an operator's cancel, from 0 when a shutdown forces
        the job) with a state_change event (running -> running, detail cancel_phase_from,
        cancel_phase_to, reason). False otherwise."""

    async def mark_abandoned(self, lease: Lease, reason: str) -> bool:
        """running with cancel_phase 2 -> abandoned; ``reason`` becomes the error message
        (error_class Abandoned) and the event's detail."""

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        """running -> scheduled at now() + delay without consuming an attempt (attempt - 1,
        metadata snooze_count + 1, attempt outcome ``snoozed``); past schedule_to_close ->
        failed with DeadlineExceeded (attempt outcome ``failed``, attempt kept); a requested
        cancel -> cancelled."""

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
    ) -> RetryAfterOutcome:
        """Like snooze, but ``consume_budget`` counts the attempt: a transient job with no
        attempts left fails with MaxAttemptsExceeded. A requested cancel is checked first
        (-> cancelled), then the deadline. Without ``consume_budget`` the attempt is given
        back (attempt - 1). Outcome ``retry_after``."""

    # --- history -------------------------------------------------------------------------
    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """Every attempt of a job, oldest first."""

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        """Every event of a job, oldest first."""

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        """Reclaim events with id > after_id older than the visibility delay, by id."""

    # --- cancel --------------------------------------------------------------------------
    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """pending/scheduled -> cancelled at once; running -> cancel_phase 1 + NOTIFY.

        Outcomes: ``cancelled``, ``requested``, ``already_requested`` (running, a request is
        in flight), ``terminal``, ``not_found``. Both writes record a ``cancel_request`` event
        and set cancel_requested_at and cancel_reason. PG: the events-channel NOTIFY carries
        ``{"type": "cancel", "job_id": ..., "worker_id": ...}``.
        """

    async def cancel_where(self, filter: JobFilter, reason: str | None) -> BulkCancelResult:
        """``write_cancel_request`` for every non-terminal job the filter matches (newest
        ``filter.limit`` of them); running jobs already asked to cancel are not counted."""

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        """Running jobs of this worker with a cancel requested, oldest request first."""

    # --- admin ---------------------------------------------------------------------------
    async def retry_job(self, job_id: UUID) -> bool:
        """failed/crashed/cancelled -> pending (attempt budget restarts); False otherwise.

        attempt 0, scheduled_at now(), result, errors, lock and cancel fields cleared; a
        state_change event (detail reason='operator_retry') and a wake.
        """

    async def retry_where(self, filter: JobFilter) -> int:
        """``retry_job`` for every retryable job the filter matches; returns the count."""

    # --- sweeps (no `now` argument: the backend's clock decides) -------------------------
    async def scheduled_to_pending(self) -> int:
        """Due scheduled jobs -> pending (scheduled_at kept as the FIFO key); NOTIFY when any
        moved."""

    async def deadline_sweep(self) -> int:
        """pending/scheduled jobs past schedule_to_close -> failed (DeadlineExceeded), no
        attempt row."""

    async def reclaim_expired_locks(self, cancel_grace: timedelta, cleanup_grace: timedelta) -> int:
        """Running jobs whose lease expired (plus the cancel graces + 60s when a cancel is in
        flight), each with a 'reclaim' event (detail: from_state, to_state, reason
        'lock_expired', worker_id, started) in the same transaction:

        - a requested cancel -> cancelled (it wins over any retry);
        - never started (claimed only) -> pending in its place, its attempt given back, no
          attempt row; after UNSTARTED_RECLAIM_LIMIT such reclaims it counts as started, so
          a job that kills its worker before its start is written cannot loop forever;
        - started, retries left -> pending at now(), else crashed; a crashed attempt.

        Retries left: transient with attempt < max_attempts, or indefinite with
        schedule_to_close unset or not passed; non_retryable never. Error class WorkerCrashed.
        One wake when anything was reclaimed.
        """

    async def expire_results(self) -> int:
        """Clear results (and result_expires_at) whose result_expires_at has passed."""

    # --- reads ---------------------------------------------------------------------------
    async def get(self, job_id: UUID) -> JobRow | None:
        """One job, or None."""

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, newest first."""

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        """Job counts per (queue, status), by queue then status in JobStatus order."""

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        """Whether any pending, scheduled or running job is in these queues (cheap on any
        backlog: the until-idle drain monitor asks it every poll)."""

    async def count_active_jobs(self, queues: Sequence[str]) -> int:
        """Pending + scheduled + running jobs in these queues."""

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        """Pending + scheduled jobs per actor (for max_pending back-pressure); actors with
        none are left out."""

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        """Stored max_pending per actor that has an actor_config row."""

    async def count_jobs(self, filter: JobFilter) -> int:
        """How many jobs ``list_jobs(filter)`` would return, counted without reading them
        (at most ``filter.limit`` when it is set)."""

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        """The job's place in its queue's dispatch order (see DispatchPosition); None when
        there is no such job. An operator read (``taskq jobs explain``), not a hot path."""

    # --- dashboard -----------------------------------------------------------------------
    async def dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        """Per-queue activity for a live dashboard, cheap on a large table.

        Exact pending/scheduled/running/claimed counts, the oldest pending job's
        ``scheduled_at``, terminal jobs per status finished within ``window``, and
        ``minutes`` per-minute counts of finished jobs. PG: every read of ``jobs`` walks an
        index (loose index scans find the queues; counts are index-only where the
        visibility map allows).
        ``window`` must be positive and ``minutes`` between 1 and 1440 (ValueError).
        """

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, most recent activity first: finished jobs by
        ``finished_at``, running ones by ``started_at`` (claimed ones by ``claimed_at``),
        waiting ones by ``created_at`` (ties: id DESC).

        Each status is read from its own index, newest first, so the read stays bounded on
        a large table; this is the dashboard's jobs pane, where ``list_jobs`` is the full
        listing. ``filter.limit`` must be between 0 and RECENT_JOBS_MAX and ``filter.ids``
        unset (ValueError).
        """

    # --- workers and leadership ----------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert (or refresh) this worker's row, status running."""

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        """status stopped, stopped_at now."""

    async def list_workers(self) -> list[WorkerRow]:
        """Every worker row, most recently seen first."""

    async def try_acquire_leadership(self, worker_id: UUID) -> bool:
        """Try to become (or stay) the maintenance leader; True while leading.

        PG: a session advisory lock on a dedicated connection; losing that connection loses
        leadership (that call returns False, the next one reconnects and tries again). The
        leader row is upserted on success. Within one backend, leadership belongs to the
        worker id that took it: another worker id asking gets False until it is released.
        """

    async def release_leadership(self, worker_id: UUID) -> None:
        """Give up leadership (no-op when not leading)."""

    async def get_leader(self) -> LeaderRow | None:
        """The current leader row, if any."""

    # --- actor config --------------------------------------------------------------------
    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        """Create missing rows from the code; never overwrite capacity; report structural
        drift (queue, metadata), overwriting it only with ``force``. One transaction."""

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        """Every actor_config row by name."""

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        """One actor_config row."""

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
    ) -> ActorConfigRow | None:
        """Set (value) or clear (None) capacity fields; UNSET leaves a field. None if no row."""

    # --- queues --------------------------------------------------------------------------
    async def list_queues(self) -> list[QueueRow]:
        """Every queue that has jobs or a row in ``queues``, by name."""

    async def get_queue(self, name: str) -> QueueRow | None:
        """One queue (None when it has neither jobs nor a row)."""

    async def update_queue(
        self,
        name: str,
        *,
        mode: QueueMode = UNSET,
        max_concurrent: int | None = UNSET,
        paused: bool = UNSET,
    ) -> QueueRow:
        """Upsert a queue row; UNSET leaves a field; ``max_concurrent=None`` clears it."""

    # --- wake-ups ------------------------------------------------------------------------
    def subscribe_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever new dispatchable work may exist (wake NOTIFY)."""

    def subscribe_cancel_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever a cancel request is written (events NOTIFY)."""


def check_protocol_version(implementation: str, declared: int) -> None:
    """Raise at import when an implementation targets another protocol version."""
    if declared != BACKEND_PROTOCOL_VERSION:
        raise RuntimeError(
            f"{implementation} implements Backend protocol v{declared}, "
            f"but taskq_core expects v{BACKEND_PROTOCOL_VERSION}"
        )


def check_dashboard_window(window: timedelta, minutes: int) -> None:
    """Validate ``dashboard_stats`` arguments the same way in every implementation."""
    if window <= timedelta(0):
        raise ValueError(f"window must be positive, got {window}")
    if not 1 <= minutes <= 1440:
        raise ValueError(f"minutes must be between 1 and 1440, got {minutes}")


def check_recent_limit(filter: JobFilter) -> None:
    """Validate a ``list_recent_jobs`` filter: no ids, a limit of at most RECENT_JOBS_MAX."""
    if filter.ids is not None:
        raise ValueError("list_recent_jobs does not filter by ids; use list_jobs")
    if filter.limit is None or filter.limit > RECENT_JOBS_MAX:
        raise ValueError(
            f"list_recent_jobs returns at most {RECENT_JOBS_MAX} rows, got limit={filter.limit}"
        )
