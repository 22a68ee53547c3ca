"""InMemoryBackend: the Backend protocol over plain dicts, for fast worker and client tests.

It mirrors the Postgres schema row for row and the SQL statement for statement: every time
predicate reads the injected Clock, rows are stored as mutable records and handed out as frozen
snapshots, JSON columns round-trip through ``json`` as jsonb would, and ``transaction()``
simulates a caller-owned transaction by buffering enqueues until the block exits cleanly.
Single-threaded by contract: one event loop, no sharing across threads.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import UUID

from taskq_core import jsontext
from taskq_core.backend.protocol import (
    UNSET,
    ActorConfigDrift,
    ActorConfigRow,
    ActorConfigSyncResult,
    ActorDeclaration,
    AttemptRow,
    BulkCancelResult,
    CancelFlag,
    CancelOutcome,
    DashboardStats,
    DispatchPosition,
    EnqueueArgs,
    ErrorInfo,
    EventRow,
    HeartbeatResult,
    JobFilter,
    JobRow,
    LeaderRow,
    Lease,
    QueueActivity,
    QueueMode,
    QueueRow,
    QueueStatusCount,
    RetryAfterOutcome,
    RetryKind,
    SnoozeOutcome,
    Start,
    Success,
    WorkerInfo,
    WorkerRow,
    check_dashboard_window,
    check_protocol_version,
    check_recent_limit,
)
from taskq_core.clock import Clock, SystemClock
from taskq_core.constants import RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS, UNSTARTED_RECLAIM_LIMIT
from taskq_core.ids import uuid7
from taskq_core.statemachine import (
    ACTIVE_STATUSES,
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    assert_valid_transition,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from taskq_core.backend.protocol import Backend

_IMPLEMENTED_PROTOCOL_VERSION = 2
check_protocol_version("InMemoryBackend", _IMPLEMENTED_PROTOCOL_VERSION)

# A cancelled job whose worker died is reclaimed only after the cancel graces plus this much
# headroom, so a merely slow cancellation is never mistaken for a crash.
_CANCEL_RECLAIM_HEADROOM = timedelta(seconds=60)
_ZERO = timedelta(0)
_LOCK_EXPIRED = ErrorInfo("WorkerCrashed", "the worker's lock expired without a terminal write")
_RETRY_KINDS: frozenset[RetryKind] = frozenset({"transient", "indefinite", "non_retryable"})
_QUEUE_MODES: frozenset[QueueMode] = frozenset({"strict_fifo", "round_robin"})
_STATUS_ORDER = {status: index for index, status in enumerate(JobStatus)}  # PG enum order
_PENDING, _SCHEDULED, _RUNNING = JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING
# dispatch.sql's bounds: a round_robin queue gets one candidate window per fairness cohort
# up to this many cohorts, then falls back to the shared window ranked by cohort...
_COHORT_BUDGET = 128
# ...its cohort windows stay whole while they add up to at most this many rows, then split
# evenly; and a shared window always holds at least _SHARED_WINDOW_FLOOR rows.
_COHORT_ROWS = 256
_SHARED_WINDOW_FLOOR = 16
# The cohort of the jobs without a fairness_key (COALESCE(fairness_key, '__null__') in SQL).
_NULL_COHORT = "__null__"
# last_served of a cohort that never started a job: first, as NULLS FIRST / -infinity sort.
_NEVER_SERVED = datetime.min.replace(tzinfo=UTC)
_RowT = TypeVar("_RowT", bound="DataclassInstance")


def _json(value: Any) -> Any:
    """A deep copy with jsonb semantics: tuples become lists; NaN, NUL and non-JSON values
    raise UnstorableValueError, as PostgreSQL refuses them."""
    return json.loads(jsontext.encode(value))


def _json_text(text: str | None) -> Any:
    """The value of JSON text a worker encoded (a result), as ``text::jsonb`` would read it:
    text that is not JSON, or holds NaN, Infinity or a NUL, raises UnstorableValueError."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise jsontext.UnstorableValueError(f"not storable as JSON: {exc}") from None
    return _json(value)  # json.loads reads NaN, Infinity and \u0000; jsonb does not


def _fifo_key(job: _Job) -> tuple[int, datetime, UUID]:
    """strict_fifo order (and the order inside a round-robin cohort): priority DESC,
    scheduled_at, id."""
    return (-job.priority, job.scheduled_at, job.id)


def _cohort(job: _Job) -> str:
    """The job's fairness cohort: its fairness_key, or the one cohort of the NULL keys."""
    return _NULL_COHORT if job.fairness_key is None else job.fairness_key


# --- stored rows ---------------------------------------------------------------------------
_JSON_COLUMNS = frozenset({"payload", "result", "metadata", "progress_state", "detail"})


def _freeze(record: object, row_type: type[_RowT], **extra: Any) -> _RowT:
    """The frozen ``row_type`` for a mutable record, sharing nothing mutable with it."""
    values = {f.name: getattr(record, f.name) for f in fields(row_type) if f.name not in extra}
    for name in _JSON_COLUMNS.intersection(values):
        values[name] = _json(values[name])
    return row_type(**values, **extra)


@dataclass(slots=True)
class _Job:
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

    def snapshot(self) -> JobRow:
        """A frozen copy that shares nothing mutable with this record."""
        return _freeze(self, JobRow)

    def clear_lock(self) -> None:
        """Forget the worker lease (the row is no longer running)."""
        self.locked_by_worker = None
        self.lock_expires_at = None

    def clear_cancel(self) -> None:
        """Forget any cancel request (a fresh attempt starts without one)."""
        self.cancel_phase = 0
        self.cancel_requested_at = None
        self.cancel_reason = None

    def set_error(
        self, error_class: str | None, message: str | None, traceback: str | None = None
    ) -> None:
        """Record (or, with None, clear) the last error on the row."""
        self.error_class, self.error_message, self.error_traceback = error_class, message, traceback


@dataclass(slots=True)
class _Worker:
    """A mutable ``workers`` row."""

    info: WorkerInfo
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None = None
    status: str = "running"


@dataclass(slots=True)
class _ActorConfig:
    """A mutable ``actor_config`` row."""

    actor: str
    queue: str
    metadata: dict[str, Any]
    max_concurrent: int | None
    max_pending: int | None
    result_ttl: timedelta | None
    created_at: datetime
    updated_at: datetime

    def snapshot(self) -> ActorConfigRow:
        """A frozen copy."""
        return _freeze(self, ActorConfigRow)


@dataclass(slots=True)
class _Queue:
    """A mutable ``queues`` row."""

    mode: QueueMode = "strict_fifo"
    max_concurrent: int | None = None
    paused: bool = False


class MemoryTransaction:
    """The handle ``InMemoryBackend.transaction()`` yields; pass it as ``connection=``.

    Enqueues made through it are buffered and become visible only when the ``async with``
    block exits without an exception; an exception discards them, like a rolled-back COMMIT.
    """

    def __init__(self, backend: InMemoryBackend) -> None:
        self.backend = backend
        self.open = True
        self.buffered: list[_Job] = []
        self.on_commit: list[Callable[[], object]] = []  # worker writes made through it
        # Jobs whose success this transaction will write: Postgres holds their rows locked
        # until it ends, so the sweeps that skip locked rows leave them alone meanwhile.
        self.settling: set[UUID] = set()


# --- the backend ---------------------------------------------------------------------------
class InMemoryBackend:
    """The Backend protocol held in Python dicts, with an injectable clock (tests only)."""

    BACKEND_PROTOCOL_VERSION: ClassVar[int] = _IMPLEMENTED_PROTOCOL_VERSION
    supports_transactional_simulation: ClassVar[bool] = True

    def __init__(self, *, clock: Clock | None = None, dispatch_oversample: int = 2) -> None:
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        self._clock: Clock = clock or SystemClock()
        self._oversample = dispatch_oversample
        self._jobs: dict[UUID, _Job] = {}
        self._attempts: dict[UUID, list[AttemptRow]] = {}
        self._events: list[EventRow] = []
        self._workers: dict[UUID, _Worker] = {}
        self._leader: LeaderRow | None = None
        self._actor_configs: dict[str, _ActorConfig] = {}
        self._queues: dict[str, _Queue] = {}
        self._wake_subscribers: set[asyncio.Event] = set()
        self._cancel_subscribers: set[asyncio.Event] = set()
        self._event_ids = itertools.count(1)
        self._attempt_ids = itertools.count(1)
        self._open_transactions: set[MemoryTransaction] = set()

    async def close(self) -> None:
        """Nothing to release; idempotent."""

    # --- shared record keeping ---------------------------------------------------------------
    def _now(self) -> datetime:
        return self._clock.now()

    def _record_event(
        self,
        job: _Job,
        kind: str,
        from_status: JobStatus | None,
        to_status: JobStatus | None,
        worker_id: UUID | None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        event = EventRow(
            id=next(self._event_ids),
            job_id=job.id,
            occurred_at=self._now(),
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            worker_id=worker_id,
            detail=_json(detail or {}),
        )
        self._events.append(event)

    def _transition(
        self,
        job: _Job,
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
        self, job: _Job, outcome: str, worker_id: UUID | None, error: ErrorInfo | None = None
    ) -> None:
        now = self._now()
        duration = None
        if job.started_at is not None:
            duration = (now - job.started_at).total_seconds() * 1000.0
        self._attempts.setdefault(job.id, []).append(
            AttemptRow(
                id=next(self._attempt_ids),
                job_id=job.id,
                attempt=job.attempt,
                worker_id=worker_id,
                outcome=outcome,
                started_at=job.started_at,
                finished_at=now,
                duration_ms=duration,
                error_class=error.error_class if error else None,
                error_message=error.message if error else None,
                error_traceback=error.traceback if error else None,
            )
        )

    def _leased(self, lease: Lease) -> _Job | None:
        """The fence of every worker write: running, locked by the lease's worker, at its
        attempt."""
        job = self._jobs.get(lease.job_id)
        if (
            job is None
            or job.status is not _RUNNING
            or job.locked_by_worker != lease.worker_id
            or job.attempt != lease.attempt
        ):
            return None
        return job

    def _date_start(self, job: _Job, ran_for: float | None) -> None:
        """Fill in a start the worker had not recorded yet: ``ran_for`` seconds ago."""
        if job.started_at is None and ran_for is not None:
            job.started_at = self._now() - timedelta(seconds=ran_for)

    def _wake(self) -> None:
        for event in self._wake_subscribers:
            event.set()

    def _matching(self, filter: JobFilter, among: frozenset[JobStatus]) -> list[_Job]:
        """Jobs the filter matches whose status is also in ``among``, newest first, limited."""
        allowed = filter.statuses()
        allowed = among if allowed is None else allowed & among
        ids = None if filter.ids is None else set(filter.ids)
        found = [
            job
            for job in self._jobs.values()
            if job.status in allowed
            and (filter.queue is None or job.queue == filter.queue)
            and (filter.actor is None or job.actor == filter.actor)
            and (ids is None or job.id in ids)
        ]
        found.sort(key=lambda job: (job.created_at, job.id), reverse=True)
        return found if filter.limit is None else found[: filter.limit]

    # --- enqueue -----------------------------------------------------------------------------
    def _new_job(self, args: EnqueueArgs, now: datetime) -> _Job:
        if args.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {args.max_attempts}")
        if args.retry_kind not in _RETRY_KINDS:
            raise ValueError(f"unknown retry_kind {args.retry_kind!r}")
        delay = args.delay if args.delay is not None and args.delay > timedelta(0) else None
        deadline = args.schedule_to_close
        return _Job(
            id=args.job_id or uuid7(),
            actor=args.actor,
            queue=args.queue,
            payload=_json(args.payload),
            status=_PENDING if delay is None else _SCHEDULED,
            priority=args.priority,
            scheduled_at=now if delay is None else now + delay,
            created_at=now,
            updated_at=now,
            retry_kind=args.retry_kind,
            max_attempts=args.max_attempts,
            identity_key=args.identity_key,
            fairness_key=args.fairness_key,
            schedule_to_close=None if deadline is None else now + deadline,
            result_ttl=args.result_ttl,
            metadata=_json(args.metadata),
            trace_id=args.trace_id,
            span_id=args.span_id,
        )

    def _transaction_handle(self, connection: Any) -> MemoryTransaction:
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

    def _insert(self, args_list: Sequence[EnqueueArgs], connection: Any) -> list[_Job]:
        """Build all rows first (so a bad item inserts nothing), then store or buffer them."""
        handle = None if connection is None else self._transaction_handle(connection)
        now = self._now()
        jobs = [self._new_job(args, now) for args in args_list]
        taken = set(self._jobs)
        if handle is not None:
            taken.update(job.id for job in handle.buffered)
        for job in jobs:
            if job.id in taken:
                raise ValueError(f"a job with id {job.id} already exists")
            taken.add(job.id)
        if handle is not None:
            handle.buffered.extend(jobs)
        else:
            self._commit(jobs)
        return jobs

    def _commit(self, jobs: Iterable[_Job]) -> None:
        any_pending = False
        for job in jobs:
            self._jobs[job.id] = job
            any_pending = any_pending or job.status is _PENDING
        if any_pending:
            self._wake()

    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        """Insert one job (buffered when ``connection`` is a transaction handle)."""
        return self._insert([args], connection)[0].snapshot()

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        """Insert all jobs at once, one row per item in order; one wake-up."""
        return [job.snapshot() for job in self._insert(args_list, connection)]

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        """Insert all jobs at once and return the count."""
        return len(self._insert(args_list, connection))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        """A simulated transaction: buffered enqueues commit on clean exit, vanish on error."""
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
        self._commit(handle.buffered)
        for write in handle.on_commit:
            write()

    # --- dispatch ----------------------------------------------------------------------------
    def _queue_row(self, name: str) -> _Queue:
        return self._queues.get(name) or _Queue()

    def _last_served(self, queues: Iterable[str]) -> dict[tuple[str, str], datetime]:
        """When a job of each (queue, fairness cohort) of ``queues`` was last claimed (any
        status; the cohorts that never had a job claimed are missing)."""
        wanted = set(queues)
        served: dict[tuple[str, str], datetime] = {}
        for job in self._jobs.values():
            if job.queue in wanted and job.claimed_at is not None:
                key = (job.queue, _cohort(job))
                last = served.get(key)
                served[key] = job.claimed_at if last is None else max(last, job.claimed_at)
        return served

    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        """Claim up to ``limit`` due pending jobs of ``queues`` for ``worker_id``: -> running.

        The same pipeline as the dispatch CTE, so the same jobs win, in the same order.
        Candidate windows of residual * oversample rows in priority DESC, scheduled_at, id
        order: uncapped actors share one per strict_fifo queue (at least 16 rows), one per
        fairness cohort in a round_robin queue (split evenly past 256 rows), or one per
        round_robin queue past 128 cohorts; every capped actor has its own per queue. Then
        the fairness rank per cohort and when each (queue, cohort) last started a job; then
        one job per free (actor, identity_key); then actor rank <= a capped actor's
        residual; then queue rank <= a capped queue's residual; then ``limit``. All in
        dispatch order: mode group (by first position in ``queues``), fairness rank (1 in
        strict_fifo), priority DESC, the cohort served least recently (never served first;
        round_robin only), scheduled_at, id.
        """
        if limit <= 0:
            return []
        now = self._now()
        oversample = self._oversample
        running = [job for job in self._jobs.values() if job.status is _RUNNING]
        actor_load = Counter(job.actor for job in running)
        queue_load = Counter(job.queue for job in running)
        taken = {(job.actor, job.identity_key) for job in running if job.identity_key is not None}
        requested = dict.fromkeys(queues)
        pending: dict[str, list[_Job]] = {name: [] for name in requested}
        for job in self._jobs.values():
            if job.status is _PENDING and job.queue in pending:
                pending[job.queue].append(job)

        # queue_capacity: unpaused queues, their mode group and residual room.
        mode_order: dict[QueueMode, int] = {}
        queue_mode: dict[str, QueueMode] = {}
        queue_room: dict[str, int] = {}  # residual > 0 only
        queue_cap: dict[str, int] = {}  # the residual of the queues with a max_concurrent
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

        # capped_actors: a max_concurrent and a pending job in any requested queue.
        with_pending = {job.actor for jobs in pending.values() for job in jobs}
        capped = {
            actor: min(limit, config.max_concurrent - actor_load[actor])
            for actor, config in self._actor_configs.items()
            if config.max_concurrent is not None and actor in with_pending
        }

        # candidates: the windows, each in FIFO order.
        candidates: list[_Job] = []
        for name, room in queue_room.items():
            due = sorted((job for job in pending[name] if job.scheduled_at <= now), key=_fifo_key)
            free = [job for job in due if job.actor not in capped]
            size = room * oversample
            cohorts = len({_cohort(job) for job in pending[name]})
            if queue_mode[name] == "strict_fifo" or cohorts > _COHORT_BUDGET:
                candidates.extend(free[: max(size, _SHARED_WINDOW_FLOOR)])
            elif cohorts:
                if cohorts * size > _COHORT_ROWS:
                    size = max(-(-size // cohorts) + 1, _COHORT_ROWS // cohorts)
                per_cohort: Counter[str] = Counter()
                for job in free:
                    per_cohort[_cohort(job)] += 1
                    if per_cohort[_cohort(job)] <= size:
                        candidates.append(job)
            for actor, residual in capped.items():
                if residual > 0:
                    mine = [job for job in due if job.actor == actor]
                    candidates.extend(mine[: residual * oversample])

        # fair_ranked: round_robin ranks per cohort (across the queues), and last_served.
        round_robin = [job for job in candidates if queue_mode[job.queue] == "round_robin"]
        served = self._last_served({job.queue for job in round_robin})
        ranks: Counter[str] = Counter()
        fairness: dict[UUID, tuple[int, datetime]] = {}  # strict_fifo: 1 and never served
        for job in sorted(round_robin, key=_fifo_key):
            cohort = _cohort(job)
            ranks[cohort] += 1
            fairness[job.id] = (ranks[cohort], served.get((job.queue, cohort), _NEVER_SERVED))

        def dispatch_order(job: _Job) -> tuple[Any, ...]:
            rank, last_served = fairness.get(job.id, (1, _NEVER_SERVED))
            mode = mode_order[queue_mode[job.queue]]
            return (mode, rank, -job.priority, last_served, job.scheduled_at, job.id)

        candidates.sort(key=dispatch_order)

        # identity_dedup, actor rank, queue rank and LIMIT, in dispatch order.
        actor_rank: Counter[str] = Counter()
        queue_rank: Counter[str] = Counter()
        claimed: list[_Job] = []
        for job in candidates:
            if job.identity_key is not None:
                identity = (job.actor, job.identity_key)
                if identity in taken:  # running already, or an earlier candidate has it
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
            self._transition(job, _RUNNING, worker_id=worker_id)
            job.attempt += 1
            job.locked_by_worker = worker_id
            job.lock_expires_at = now + lock_lease
            job.claimed_at = now
            job.started_at = None
        return [job.snapshot() for job in claimed]

    async def release_leases(
        self,
        worker_id: UUID,
        leases: Sequence[Lease],
        *,
        reason: str,
        retry_delay: timedelta = timedelta(0),
        error: ErrorInfo | None = None,
    ) -> int:
        """Give back held jobs: unstarted ones to pending (attempt given back), started ones
        through a crashed attempt; a requested cancel ends them cancelled."""
        error = error or ErrorInfo("WorkerReleased", f"the worker gave the job back ({reason})")
        now = self._now()
        released = woken = 0
        for lease in {lease.job_id: lease for lease in leases}.values():
            job = self._leased(replace(lease, worker_id=worker_id))
            if job is None:
                continue
            started = job.started_at is not None
            released += 1
            target = self._give_back(job, worker_id, now, started, error, _SCHEDULED, retry_delay)
            woken += target is _PENDING
            detail = {"reason": reason, "started": started}
            self._settle_given_back(job, target, worker_id, kind="state_change", detail=detail)
        if woken:
            self._wake()
        return released

    # --- heartbeat ---------------------------------------------------------------------------
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
        held: list[_Job] = []
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
        flagged = sorted(
            (job for job in held if job.cancel_requested_at is not None),
            key=lambda job: (job.cancel_requested_at, job.id),
        )
        return HeartbeatResult(
            held=frozenset(job.id for job in held),
            extended=frozenset(extended),
            cancel_flags=[
                CancelFlag(job.id, job.cancel_phase, job.cancel_requested_at, job.cancel_reason)
                for job in flagged
            ],
        )

    # --- terminal and rescheduling writes ----------------------------------------------------
    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        """started_at = now - ran_for for claimed jobs whose lease is still this worker's."""
        written: set[UUID] = set()
        for start in starts:
            job = self._leased(Lease(start.job_id, worker_id, start.attempt))
            if job is not None and job.started_at is None:
                job.started_at = self._now() - timedelta(seconds=start.ran_for)
                written.add(job.id)
        return written

    async def mark_succeeded(
        self,
        lease: Lease,
        result: Any,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """running -> succeeded; result_expires_at from the stored, job or fallback TTL."""
        encoded = None if result is None else jsontext.encode(result)
        success = Success(lease.job_id, lease.attempt, encoded, fallback_result_ttl, ran_for)
        return bool(await self.mark_succeeded_many(lease.worker_id, [success]))

    def _settling(self, job_id: UUID) -> bool:
        """Whether an open transaction will write this job's success (its row is locked)."""
        return any(job_id in handle.settling for handle in self._open_transactions)

    def _succeed(self, worker_id: UUID, success: Success, result: Any) -> bool:
        job = self._leased(Lease(success.job_id, worker_id, success.attempt))
        if job is None:
            return False
        config = self._actor_configs.get(job.actor)
        ttl = config.result_ttl if config is not None else None
        ttl = ttl if ttl is not None else job.result_ttl
        ttl = ttl if ttl is not None else success.fallback_result_ttl
        self._date_start(job, success.ran_for)
        self._record_attempt(job, "succeeded", worker_id)
        self._transition(job, JobStatus.SUCCEEDED, worker_id=worker_id)
        job.result = result
        job.result_expires_at = None if ttl is None else job.updated_at + ttl
        job.lock_expires_at = None
        return True

    async def mark_succeeded_many(self, worker_id: UUID, successes: Sequence[Success]) -> set[UUID]:
        """mark_succeeded for each; the ids whose leases were still this worker's. Every
        result is read first, so one that cannot be stored writes nothing (one statement)."""
        results = [_json_text(s.result_json) for s in successes]
        return {
            s.job_id
            for s, result in zip(successes, results, strict=True)
            if self._succeed(worker_id, s, result)
        }

    async def mark_succeeded_with_conn(
        self,
        connection: Any,
        lease: Lease,
        result_json: str | None,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """The success applies when the transaction handle commits; until then the job is
        held as Postgres holds its locked row (the reclaim sweep and heartbeats skip it)."""
        handle = self._transaction_handle(connection)
        result = _json_text(result_json)
        if self._leased(lease) is None or lease.job_id in handle.settling:
            return False  # not this lease's row, or this transaction settled it already
        success = Success(lease.job_id, lease.attempt, result_json, fallback_result_ttl, ran_for)
        handle.settling.add(lease.job_id)
        handle.on_commit.append(lambda: self._succeed(lease.worker_id, success, result))
        return True

    def _fail(self, job: _Job, worker_id: UUID, error: ErrorInfo) -> None:
        """running -> failed with ``error`` as the job's last error."""
        self._transition(job, JobStatus.FAILED, worker_id=worker_id)
        job.set_error(error.error_class, error.message, error.traceback)
        job.lock_expires_at = None

    def _cancel(self, job: _Job, worker_id: UUID) -> None:
        """running -> cancelled: the worker's own write after a requested cancel."""
        self._transition(job, JobStatus.CANCELLED, worker_id=worker_id)
        job.lock_expires_at = None

    def _reschedule(self, job: _Job, worker_id: UUID, run_at: datetime) -> None:
        self._transition(job, _SCHEDULED, worker_id=worker_id)
        job.scheduled_at = run_at
        job.cancel_phase = 0
        job.clear_lock()

    @staticmethod
    def _passes_deadline(job: _Job, at: datetime) -> bool:
        return job.schedule_to_close is not None and at > job.schedule_to_close

    async def mark_failed_or_retry(
        self,
        lease: Lease,
        error: ErrorInfo,
        retry_delay: timedelta | None,
        *,
        ran_for: float | None = None,
    ) -> JobRow | None:
        """No delay: -> failed. Else -> scheduled at now + delay, cancelled when a cancel was
        requested, or failed DeadlineExceeded when the retry passes schedule_to_close. None
        when the lease is not the row's any more."""
        job = self._leased(lease)
        if job is None:
            return None
        worker_id = lease.worker_id
        self._date_start(job, ran_for)
        run_at = None if retry_delay is None else self._now() + retry_delay
        if run_at is None:
            self._record_attempt(job, "failed", worker_id, error)
            self._fail(job, worker_id, error)
        elif job.cancel_requested_at is not None:
            self._record_attempt(job, "failed", worker_id, error)
            self._cancel(job, worker_id)
            job.set_error(error.error_class, error.message, error.traceback)
        elif self._passes_deadline(job, run_at):
            # The attempt keeps the actor's own error; the job records why it stopped.
            self._record_attempt(job, "failed", worker_id, error)
            message = f"retry would start after schedule_to_close (last error: {error.message})"
            self._fail(job, worker_id, ErrorInfo("DeadlineExceeded", message, error.traceback))
        else:
            self._record_attempt(job, "retried", worker_id, error)
            self._reschedule(job, worker_id, run_at)
            job.set_error(error.error_class, error.message, error.traceback)
        return job.snapshot()

    async def mark_cancelled(self, lease: Lease, *, ran_for: float | None = None) -> bool:
        """running -> cancelled (the actor stopped after a cancel request)."""
        job = self._leased(lease)
        if job is None:
            return False
        self._date_start(job, ran_for)
        self._record_attempt(job, "cancelled", lease.worker_id)
        self._cancel(job, lease.worker_id)
        return True

    async def write_cancel_escalation(self, lease: Lease, *, reason: str = "requested") -> bool:
        """cancel_phase -> 2 on a running job of this lease, with an event."""
        job = self._leased(lease)
        if job is None or job.cancel_phase >= 2:
            return False
        detail = {"cancel_phase_from": job.cancel_phase, "cancel_phase_to": 2, "reason": reason}
        job.cancel_phase = 2
        job.updated_at = self._now()
        self._record_event(job, "state_change", _RUNNING, _RUNNING, lease.worker_id, detail)
        return True

    async def mark_abandoned(self, lease: Lease, reason: str) -> bool:
        """running with cancel_phase 2 -> abandoned (forced cancel never finished)."""
        job = self._leased(lease)
        if job is None or job.cancel_phase != 2:
            return False
        if job.started_at is None:
            job.started_at = self._now()
        error = ErrorInfo("Abandoned", reason)
        self._record_attempt(job, "abandoned", lease.worker_id, error)
        self._transition(
            job, JobStatus.ABANDONED, worker_id=lease.worker_id, detail={"reason": reason}
        )
        job.set_error(error.error_class, error.message)
        job.lock_expires_at = None
        return True

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        """running -> scheduled at now + delay, attempt given back, snooze_count + 1."""
        job = self._leased(lease)
        if job is None:
            return "noop"
        worker_id = lease.worker_id
        self._date_start(job, ran_for)
        if job.cancel_requested_at is not None:
            self._record_attempt(job, "cancelled", worker_id)
            self._cancel(job, worker_id)
            return "cancelled"
        run_at = self._now() + delay
        if self._passes_deadline(job, run_at):
            message = "snooze would start after schedule_to_close"
            self._fail_attempt(job, worker_id, ErrorInfo("DeadlineExceeded", message))
            return "failed"
        self._record_attempt(job, "snoozed", worker_id)
        self._reschedule(job, worker_id, run_at)
        job.attempt = max(job.attempt - 1, 0)
        job.metadata["snooze_count"] = int(job.metadata.get("snooze_count", 0)) + 1
        return "scheduled"

    def _fail_attempt(self, job: _Job, worker_id: UUID, error: ErrorInfo) -> None:
        """The backend ends the attempt itself (deadline or budget): failed attempt + row."""
        self._record_attempt(job, "failed", worker_id, error)
        self._fail(job, worker_id, error)

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
    ) -> RetryAfterOutcome:
        """Reschedule at now + delay; with ``consume_budget`` the attempt counts, so a
        transient job with no attempts left fails with MaxAttemptsExceeded. A requested
        cancel ends the job cancelled instead."""
        job = self._leased(lease)
        if job is None:
            return "noop"
        worker_id = lease.worker_id
        self._date_start(job, ran_for)
        if job.cancel_requested_at is not None:
            self._record_attempt(job, "cancelled", worker_id)
            self._cancel(job, worker_id)
            return "cancelled"
        run_at = self._now() + delay
        if self._passes_deadline(job, run_at):
            message = "retry-after would start after schedule_to_close"
            self._fail_attempt(job, worker_id, ErrorInfo("DeadlineExceeded", message))
            return "failed:DeadlineExceeded"
        if consume_budget and job.retry_kind == "transient" and job.attempt >= job.max_attempts:
            message = f"all {job.max_attempts} attempts used; retry-after refused"
            self._fail_attempt(job, worker_id, ErrorInfo("MaxAttemptsExceeded", message))
            return "failed:MaxAttemptsExceeded"
        self._record_attempt(job, "retry_after", worker_id)
        self._reschedule(job, worker_id, run_at)
        if not consume_budget:
            job.attempt = max(job.attempt - 1, 0)
        return "scheduled"

    def _can_retry(self, job: _Job, now: datetime) -> bool:
        """Retry branch of reclaim/isolation: budget left (transient) or deadline open."""
        if job.retry_kind == "transient":
            return job.attempt < job.max_attempts
        if job.retry_kind == "indefinite":
            return job.schedule_to_close is None or job.schedule_to_close > now
        return False

    def _reclaim(self, job: _Job, now: datetime) -> None:
        """Sweep 1 for one expired lease: a requested cancel -> cancelled; never started ->
        pending in its place, attempt given back, no attempt row (until the unstarted-reclaim
        limit); started -> pending (retries left) or crashed, with a crashed attempt."""
        worker_id = job.locked_by_worker
        unstarted_before = sum(
            1
            for event in self._events
            if event.job_id == job.id
            and event.kind == "reclaim"
            and event.detail.get("started") is False
        )
        started = job.started_at is not None or unstarted_before >= UNSTARTED_RECLAIM_LIMIT
        target = self._give_back(job, worker_id, now, started, _LOCK_EXPIRED, _PENDING, _ZERO)
        detail = {
            "from_state": _RUNNING.value,
            "to_state": target.value,
            "reason": "lock_expired",
            "worker_id": None if worker_id is None else str(worker_id),
            "started": started,
        }
        self._settle_given_back(job, target, worker_id, kind="reclaim", detail=detail)

    def _give_back(
        self,
        job: _Job,
        worker_id: UUID | None,
        now: datetime,
        started: bool,
        error: ErrorInfo,
        retry_as: JobStatus,
        retry_delay: timedelta,
    ) -> JobStatus:
        """Where a job its worker no longer runs goes (a reclaim, a release), as the SQL of
        both decides: a started one gets a crashed attempt carrying ``error``, a never-started
        one its attempt back; then a requested cancel -> cancelled, never started -> pending
        in its place, retries left -> ``retry_as`` at now + ``retry_delay``, else crashed."""
        if started:
            self._record_attempt(job, "crashed", worker_id, error)
            job.set_error(error.error_class, error.message)
        else:
            job.attempt = max(job.attempt - 1, 0)
        if job.cancel_requested_at is not None:
            return JobStatus.CANCELLED
        if not started:
            return _PENDING
        if self._can_retry(job, now):
            job.scheduled_at = now + retry_delay
            return retry_as
        return JobStatus.CRASHED

    def _settle_given_back(
        self,
        job: _Job,
        target: JobStatus,
        worker_id: UUID | None,
        *,
        kind: str,
        detail: dict[str, Any],
    ) -> None:
        self._transition(job, target, worker_id=worker_id, kind=kind, detail=detail)
        if target is not JobStatus.CANCELLED:
            job.cancel_phase = 0
        job.clear_lock()

    # --- history -----------------------------------------------------------------------------
    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """Every attempt of a job, oldest first."""
        return list(self._attempts.get(job_id, []))

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        """Every event of a job, oldest first."""
        return [_freeze(e, EventRow) for e in self._events if e.job_id == job_id]

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        """Reclaim events with id > after_id that are at least the visibility delay old."""
        if visibility_delay is None:
            visibility_delay = timedelta(seconds=RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS)
        horizon = self._now() - visibility_delay
        found = [
            _freeze(e, EventRow)
            for e in self._events
            if e.kind == "reclaim" and e.id > after_id and e.occurred_at <= horizon
        ]
        return found[: max(limit, 0)]

    # --- cancel ------------------------------------------------------------------------------
    def _request_cancel(self, job: _Job, reason: str | None) -> CancelOutcome:
        if job.status in TERMINAL_STATUSES:
            return "terminal"
        if job.status is _RUNNING and job.cancel_requested_at is not None:
            return "already_requested"
        now = self._now()
        job.cancel_requested_at = now
        job.cancel_reason = reason
        job.updated_at = now
        from_status = job.status
        if from_status is _RUNNING:
            job.cancel_phase = 1
            detail = {"reason": reason, "cancel_phase": 1}
            self._record_event(job, "cancel_request", _RUNNING, _RUNNING, None, detail)
            for event in self._cancel_subscribers:
                event.set()
            return "requested"
        assert_valid_transition(from_status, JobStatus.CANCELLED, job.id)
        job.status = JobStatus.CANCELLED
        job.finished_at = now
        self._record_event(job, "cancel_request", from_status, job.status, None, {"reason": reason})
        return "cancelled"

    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """pending/scheduled -> cancelled at once; running -> cancel_phase 1 (+ cancel wake)."""
        job = self._jobs.get(job_id)
        return "not_found" if job is None else self._request_cancel(job, reason)

    async def cancel_where(self, filter: JobFilter, reason: str | None) -> BulkCancelResult:
        """Cancel every non-terminal job the filter matches (its limit applies)."""
        outcomes = Counter(
            self._request_cancel(job, reason) for job in self._matching(filter, ACTIVE_STATUSES)
        )
        return BulkCancelResult(cancelled=outcomes["cancelled"], requested=outcomes["requested"])

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        """Running jobs of this worker with a cancel requested, oldest request first."""
        flagged = [
            job
            for job in self._jobs.values()
            if job.status is _RUNNING
            and job.locked_by_worker == worker_id
            and job.cancel_requested_at is not None
        ]
        flagged.sort(key=lambda job: (job.cancel_requested_at, job.id))
        return [
            CancelFlag(job.id, job.cancel_phase, job.cancel_requested_at, job.cancel_reason)
            for job in flagged
        ]

    # --- admin -------------------------------------------------------------------------------
    def _retry(self, job: _Job) -> bool:
        if job.status not in RETRYABLE_STATUSES:
            return False
        self._transition(job, _PENDING, checked=False, detail={"reason": "operator_retry"})
        job.scheduled_at = job.updated_at
        job.attempt = 0
        job.finished_at = job.started_at = None
        job.result = job.result_expires_at = None
        job.clear_lock()
        job.clear_cancel()
        job.set_error(None, None)
        return True

    async def retry_job(self, job_id: UUID) -> bool:
        """failed/crashed/cancelled -> pending with a fresh attempt budget; False otherwise."""
        job = self._jobs.get(job_id)
        retried = job is not None and self._retry(job)
        if retried:
            self._wake()
        return retried

    async def retry_where(self, filter: JobFilter) -> int:
        """Retry every retryable job the filter matches (its limit applies)."""
        count = sum(self._retry(job) for job in self._matching(filter, RETRYABLE_STATUSES))
        if count:
            self._wake()
        return count

    # --- sweeps ------------------------------------------------------------------------------
    async def scheduled_to_pending(self) -> int:
        """Due scheduled jobs -> pending (scheduled_at kept as their FIFO key); wake on any."""
        now = self._now()
        due = [j for j in self._jobs.values() if j.status is _SCHEDULED and j.scheduled_at <= now]
        for job in due:
            self._transition(job, _PENDING)
        if due:
            self._wake()
        return len(due)

    async def deadline_sweep(self) -> int:
        """Waiting jobs past schedule_to_close -> failed (DeadlineExceeded)."""
        now = self._now()
        late = [
            job
            for job in self._jobs.values()
            if job.status in (_PENDING, _SCHEDULED)
            and job.schedule_to_close is not None
            and job.schedule_to_close < now
        ]
        for job in late:
            self._transition(job, JobStatus.FAILED)
            job.set_error("DeadlineExceeded", "schedule_to_close passed before the job ran")
        return len(late)

    async def reclaim_expired_locks(self, cancel_grace: timedelta, cleanup_grace: timedelta) -> int:
        """Running jobs whose lease expired (cancel in flight: plus both graces and 60s), each
        as ``_reclaim`` settles it, with one 'reclaim' event."""
        now = self._now()
        cancel_headroom = cancel_grace + cleanup_grace + _CANCEL_RECLAIM_HEADROOM
        expired = [
            job
            for job in self._jobs.values()
            if job.status is _RUNNING
            and job.lock_expires_at is not None
            and job.lock_expires_at + (cancel_headroom if job.cancel_requested_at else _ZERO) < now
            and not self._settling(job.id)  # PG: FOR UPDATE SKIP LOCKED
        ]
        for job in expired:
            self._reclaim(job, now)
        if expired:
            self._wake()
        return len(expired)

    async def expire_results(self) -> int:
        """Clear results whose result_expires_at has passed."""
        now = self._now()
        expired = [
            job
            for job in self._jobs.values()
            if job.result_expires_at is not None and job.result_expires_at < now
        ]
        for job in expired:
            job.result = job.result_expires_at = None
            job.updated_at = now
        return len(expired)

    # --- reads -------------------------------------------------------------------------------
    async def get(self, job_id: UUID) -> JobRow | None:
        """One job, or None."""
        job = self._jobs.get(job_id)
        return None if job is None else job.snapshot()

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, newest first (created_at DESC, id DESC)."""
        return [job.snapshot() for job in self._matching(filter, frozenset(JobStatus))]

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        """Job counts per (queue, status), by queue then status in enum order."""
        counts = Counter((job.queue, job.status) for job in self._jobs.values())
        keys = sorted(counts, key=lambda key: (key[0], _STATUS_ORDER[key[1]]))
        return [QueueStatusCount(queue, status, counts[queue, status]) for queue, status in keys]

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        """Whether any pending, scheduled or running job is in these queues."""
        wanted = set(queues)
        return any(j.queue in wanted and j.status in ACTIVE_STATUSES for j in self._jobs.values())

    async def count_active_jobs(self, queues: Sequence[str]) -> int:
        """Pending + scheduled + running jobs in these queues."""
        wanted = set(queues)
        return sum(
            1 for j in self._jobs.values() if j.queue in wanted and j.status in ACTIVE_STATUSES
        )

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        """Pending + scheduled jobs per requested actor (actors with none are left out)."""
        wanted = set(actors)
        counts = Counter(
            job.actor
            for job in self._jobs.values()
            if job.actor in wanted and job.status in (_PENDING, _SCHEDULED)
        )
        return dict(counts)

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        """Stored max_pending of every actor with an actor_config row."""
        return {name: row.max_pending for name, row in self._actor_configs.items()}

    async def count_jobs(self, filter: JobFilter) -> int:
        """How many jobs the filter matches (at most ``filter.limit``)."""
        return len(self._matching(filter, frozenset(JobStatus)))

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        """The job's place in its queue's dispatch order, as ``dispatch_batch`` ranks it."""
        target = self._jobs.get(job_id)
        if target is None:
            return None
        now = self._now()
        mode = self._queue_row(target.queue).mode
        if target.status is not _PENDING or target.scheduled_at > now:
            return DispatchPosition(now, mode, 0, 0)
        due = sorted(
            (
                job
                for job in self._jobs.values()
                if job.status is _PENDING and job.queue == target.queue and job.scheduled_at <= now
            ),
            key=_fifo_key,
        )
        # round_robin: rank in the cohort, priority, the cohort served least recently
        # (never served first), age; strict_fifo: priority, age.
        served = self._last_served([target.queue])
        ranks: Counter[str] = Counter()
        order: dict[UUID, tuple[Any, ...]] = {}
        for job in due:
            cohort = _cohort(job)
            ranks[cohort] += 1
            key: tuple[Any, ...] = _fifo_key(job)
            if mode == "round_robin":
                last_served = served.get((job.queue, cohort), _NEVER_SERVED)
                key = (ranks[cohort], -job.priority, last_served, *key[1:])
            order[job.id] = key
        ahead = [job for job in due if order[job.id] < order[target.id]]
        other = sum(1 for job in ahead if _cohort(job) != _cohort(target))
        return DispatchPosition(now, mode, len(ahead), other)

    # --- dashboard ---------------------------------------------------------------------------
    async def dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        """Per-queue activity: exact active counts, the oldest pending job, terminal jobs
        finished within ``window`` and ``minutes`` per-minute finished counts (oldest first)."""
        check_dashboard_window(window, minutes)
        now = self._now()
        names = sorted({job.queue for job in self._jobs.values()} | set(self._queues))
        activity = []
        for name in names:
            jobs = [job for job in self._jobs.values() if job.queue == name]
            counts = Counter(job.status for job in jobs)
            claimed = sum(1 for job in jobs if job.status is _RUNNING and job.started_at is None)
            pending = [job.scheduled_at for job in jobs if job.status is _PENDING]
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
            settings = self._queues.get(name) or _Queue()
            activity.append(
                QueueActivity(
                    name=name,
                    mode=settings.mode,
                    max_concurrent=settings.max_concurrent,
                    paused=settings.paused,
                    pending=counts[_PENDING],
                    scheduled=counts[_SCHEDULED],
                    running=counts[_RUNNING] - claimed,
                    oldest_pending_at=min(pending, default=None),
                    finished={s: finished[s] for s in JobStatus if finished[s]},
                    finished_per_minute=per_minute,
                    claimed=claimed,
                )
            )
        return DashboardStats(now=now, window=window, queues=activity)

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, most recent activity first (finished_at for finished
        jobs, started_at (else claimed_at) for running ones, created_at for waiting ones;
        ties id DESC)."""
        check_recent_limit(filter)

        def activity(job: _Job) -> tuple[datetime, UUID]:
            if job.status in TERMINAL_STATUSES and job.finished_at is not None:
                return job.finished_at, job.id
            if job.status is _RUNNING:
                since = job.started_at or job.claimed_at
                if since is not None:
                    return since, job.id
            return job.created_at, job.id

        found = self._matching(replace(filter, limit=None), frozenset(JobStatus))
        found.sort(key=activity, reverse=True)
        return [job.snapshot() for job in found[: filter.limit]]

    # --- workers and leadership --------------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh this worker's row, status running."""
        now = self._now()
        info = replace(info, queues=list(info.queues), actors=list(info.actors))
        existing = self._workers.get(info.id)
        started_at = now if existing is None else existing.started_at
        self._workers[info.id] = _Worker(info, started_at=started_at, last_seen_at=now)

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        """status stopped, stopped_at now."""
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.status, worker.stopped_at = "stopped", self._now()

    async def list_workers(self) -> list[WorkerRow]:
        """Every worker, most recently seen first, with leadership and running jobs resolved."""
        running = Counter(
            j.locked_by_worker
            for j in self._jobs.values()
            if j.status is _RUNNING and j.started_at is not None
        )
        claimed = Counter(
            j.locked_by_worker
            for j in self._jobs.values()
            if j.status is _RUNNING and j.started_at is None
        )
        leader_id = None if self._leader is None else self._leader.worker_id
        workers = sorted(
            self._workers.values(), key=lambda w: (w.last_seen_at, w.info.id), reverse=True
        )
        return [
            _freeze(
                w.info,
                WorkerRow,
                started_at=w.started_at,
                last_seen_at=w.last_seen_at,
                stopped_at=w.stopped_at,
                status=w.status,
                is_leader=w.info.id == leader_id,
                running_jobs=running[w.info.id],
                claimed_jobs=claimed[w.info.id],
                queues=list(w.info.queues),
                actors=list(w.info.actors),
            )
            for w in workers
        ]

    async def try_acquire_leadership(self, worker_id: UUID) -> bool:
        """The first worker to ask leads until it releases; the leader row is upserted."""
        now = self._now()
        if self._leader is None:
            self._leader = LeaderRow(worker_id, elected_at=now, last_seen_at=now)
        elif self._leader.worker_id == worker_id:
            self._leader = replace(self._leader, last_seen_at=now)
        else:
            return False
        return True

    async def release_leadership(self, worker_id: UUID) -> None:
        """Give up leadership (no-op when not leading)."""
        if self._leader is not None and self._leader.worker_id == worker_id:
            self._leader = None

    async def get_leader(self) -> LeaderRow | None:
        """The current leader row, if any."""
        return self._leader

    # --- actor config ------------------------------------------------------------------------
    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        """Create missing rows; report (never write) capacity differences; report structural
        drift and overwrite it only with ``force``. All or nothing, like one transaction."""
        now = self._now()
        created: list[str] = []
        overrides: list[tuple[str, str, Any, Any]] = []
        drift: list[ActorConfigDrift] = []
        additions: dict[str, _ActorConfig] = {}
        for decl in declared:
            metadata = _json(decl.metadata)  # validate before anything is stored
            row = self._actor_configs.get(decl.actor) or additions.get(decl.actor)
            if row is None:
                additions[decl.actor] = _ActorConfig(
                    decl.actor,
                    decl.queue,
                    metadata,
                    decl.max_concurrent,
                    decl.max_pending,
                    decl.result_ttl,
                    created_at=now,
                    updated_at=now,
                )
                created.append(decl.actor)
                continue
            for name in ("max_concurrent", "max_pending", "result_ttl"):
                stored, wanted = getattr(row, name), getattr(decl, name)
                if stored != wanted:
                    overrides.append((decl.actor, name, stored, wanted))
            if row.queue != decl.queue:
                drift.append(ActorConfigDrift(decl.actor, "queue", row.queue, decl.queue))
            if row.metadata != metadata:
                drift.append(
                    ActorConfigDrift(decl.actor, "metadata", _json(row.metadata), metadata)
                )
        self._actor_configs.update(additions)
        if force:
            for item in drift:
                row = self._actor_configs[item.actor]
                setattr(row, item.field, _json(item.declared))
                row.updated_at = now
        return ActorConfigSyncResult(created, overrides, drift, overwritten=force and bool(drift))

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        """Every actor_config row by actor name."""
        return [self._actor_configs[name].snapshot() for name in sorted(self._actor_configs)]

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        """One actor_config row, or None."""
        row = self._actor_configs.get(actor)
        return None if row is None else row.snapshot()

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
    ) -> ActorConfigRow | None:
        """Set (value) or clear (None) capacity fields; UNSET leaves a field. None if no row."""
        row = self._actor_configs.get(actor)
        if row is None:
            return None
        for name, value in (("max_concurrent", max_concurrent), ("max_pending", max_pending)):
            if value is not UNSET and value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if max_concurrent is not UNSET:
            row.max_concurrent = max_concurrent
        if max_pending is not UNSET:
            row.max_pending = max_pending
        if result_ttl is not UNSET:
            row.result_ttl = result_ttl
        row.updated_at = self._now()
        self._wake()  # a raised cap can make waiting jobs dispatchable
        return row.snapshot()

    # --- queues ------------------------------------------------------------------------------
    def _queue_snapshot(self, name: str) -> QueueRow | None:
        counts = Counter(job.status for job in self._jobs.values() if job.queue == name)
        row = self._queues.get(name)
        if row is None and not counts:
            return None
        settings = row or _Queue()
        ordered = {status: counts[status] for status in JobStatus if counts[status]}
        return QueueRow(
            name=name,
            mode=settings.mode,
            max_concurrent=settings.max_concurrent,
            paused=settings.paused,
            has_row=row is not None,
            counts=ordered,
        )

    async def list_queues(self) -> list[QueueRow]:
        """Every queue that has jobs or a row, by name."""
        names = sorted({job.queue for job in self._jobs.values()} | set(self._queues))
        return [row for name in names if (row := self._queue_snapshot(name)) is not None]

    async def get_queue(self, name: str) -> QueueRow | None:
        """One queue, or None when it has neither jobs nor a row."""
        return self._queue_snapshot(name)

    async def update_queue(
        self,
        name: str,
        *,
        mode: QueueMode = UNSET,
        max_concurrent: int | None = UNSET,
        paused: bool = UNSET,
    ) -> QueueRow:
        """Upsert a queue row; UNSET leaves a field; ``max_concurrent=None`` clears it."""
        if mode is not UNSET and mode not in _QUEUE_MODES:
            raise ValueError(f"unknown queue mode {mode!r} (valid: round_robin, strict_fifo)")
        if max_concurrent is not UNSET and max_concurrent is not None and max_concurrent < 0:
            raise ValueError(f"max_concurrent must not be negative, got {max_concurrent}")
        row = self._queues.setdefault(name, _Queue())
        if mode is not UNSET:
            row.mode = mode
        if max_concurrent is not UNSET:
            row.max_concurrent = max_concurrent
        if paused is not UNSET:
            row.paused = bool(paused)
        self._wake()  # a resumed queue or a raised cap can make waiting jobs dispatchable
        snapshot = self._queue_snapshot(name)
        assert snapshot is not None  # the row exists now
        return snapshot

    # --- wake-ups ----------------------------------------------------------------------------
    @asynccontextmanager
    async def subscribe_wake(self) -> AsyncIterator[asyncio.Event]:
        """An Event set whenever new dispatchable work may exist, registered while inside."""
        async with self._subscription(self._wake_subscribers) as event:
            yield event

    @asynccontextmanager
    async def subscribe_cancel_wake(self) -> AsyncIterator[asyncio.Event]:
        """An Event set whenever a running job gets a cancel request, registered while inside."""
        async with self._subscription(self._cancel_subscribers) as event:
            yield event

    @staticmethod
    @asynccontextmanager
    async def _subscription(subscribers: set[asyncio.Event]) -> AsyncIterator[asyncio.Event]:
        event = asyncio.Event()
        subscribers.add(event)
        try:
            yield event
        finally:
            subscribers.discard(event)


if TYPE_CHECKING:

    def _satisfies_protocol(backend: InMemoryBackend) -> Backend:
        return backend  # mypy checks every signature against the protocol here
