"""Value types every part of the Backend protocol speaks: jobs, leases, history rows, filters.

Frozen, slotted dataclasses built by both backends; ``from_values`` builds them without
``__init__`` on the hot paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar
from uuid import UUID

from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus, parse_status

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
    is ``pending`` with ``scheduled_at = now()``. ``run_at`` (timezone-aware; not with
    ``delay``) is the absolute form: after now, ``scheduled`` until then, else ``pending``
    (``start_time``). ``schedule_to_close`` is a relative deadline
    from enqueue time (``jobs.schedule_to_close = now() + schedule_to_close``).

    ``unique_key`` without ``unique_for``: no second job with that key while one is waiting
    or running. With ``unique_for``: at most one job with that key per window of that length
    (windows aligned on the Unix epoch, on the backend's clock), whatever its state. A
    duplicate raises SingletonCollisionError and inserts nothing.
    """

    # Alike actors.py's ActorRef by shape only: defaulted fields, some of the same names (the
    # enqueue carries what it resolved from the actor, and more).
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
    unique_key: str | None = None
    unique_for: timedelta | None = None
    run_at: datetime | None = None
    # A workflow step with dependencies: inserted ``waiting`` (never dispatched) until the
    # release; its ``scheduled_at`` holds the start asked for meanwhile.
    waiting: bool = False


def start_time(args: EnqueueArgs, now: datetime) -> datetime | None:
    """When a job of ``args`` inserted at ``now`` becomes due (its ``scheduled_at``, status
    ``scheduled``), or None when it is due at once (``pending`` at ``now``)."""
    if args.run_at is not None:
        return args.run_at if args.run_at > now else None
    if args.delay is not None and args.delay > timedelta(0):
        return now + args.delay
    return None


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job as listings read it (``search_jobs``, ``list_recent_jobs``): every column of
    its row but the three an application fills without bound, the payload, the result and
    the error's traceback, so a page of a listing costs the same whatever the jobs carry.
    ``get`` reads the whole row (a JobRow, which is a JobSummary too).

    ``lock_expires_at`` is set only while running. ``locked_by_worker`` is set while running,
    kept after the owning worker's own terminal write (who ran it last) and cleared when the
    job goes back to waiting (retry, snooze, reclaim, release, operator retry).
    ``claimed_at`` is when the last attempt was claimed; ``started_at`` when its body
    started: a running job whose ``started_at`` is None is claimed, waiting for a consumer.
    ``attempt`` is the number of the last claim (ctx.attempt): every claim adds one and none
    gives it back, so no two bodies share a number (a claim that ran no body leaves a gap).
    ``uncounted_attempts``: how many of those spent no retry budget (a snooze, a retry-after
    without budget, a rate limit's hold, a shutdown's interrupt, a give-back of a body that
    never started); ``attempts_used`` is the rest.
    ``unstarted_reclaims``: how often the reclaim sweep gave the job back because its body's
    start was never recorded; a worker that claims it with a count above 0 records the start
    before the body runs, so a body that kills its worker at once is counted as a crash.
    """

    id: UUID
    actor: str
    queue: str
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
    result_ttl: timedelta | None
    result_expires_at: datetime | None
    error_class: str | None
    error_message: str | None
    metadata: dict[str, Any]
    trace_id: str | None
    span_id: str | None
    progress_seq: int
    progress_state: dict[str, Any] | None
    updated_at: datetime
    unique_key: str | None  # as stored: a windowed key carries its window's start
    unique_until: datetime | None  # set: the key is held in every state (its window's end)
    unstarted_reclaims: int
    uncounted_attempts: int

    @property
    def attempts_used(self) -> int:
        """Attempts that counted against ``max_attempts`` (the one in progress included, and
        a claim held whose body has not started: the budget the settle statements judge)."""
        return self.attempt - self.uncounted_attempts

    @property
    def attempts_spent(self) -> int:
        """``attempts_used`` as screens show it: a claim whose body has not started has spent
        nothing yet (a release, a reclaim or a cancel gives it back), so a claimed job shows
        the attempts it used before, and a running one the attempt in progress."""
        return max(self.attempts_used - 1, 0) if self.is_claimed else self.attempts_used

    @property
    def attempt_budget(self) -> int:
        """The attempts the retry policy will really run: 1 for a non-retryable job, whatever
        ``max_attempts`` it stored; what screens show ``attempts_used`` out of."""
        return 1 if self.retry_kind == "non_retryable" else self.max_attempts

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
class JobRow(JobSummary):
    """A snapshot of one whole ``jobs`` row: the JobSummary's columns (see there), then the
    payload, the result and the last error's traceback."""

    payload: dict[str, Any]
    result: Any
    error_traceback: str | None


@dataclass(frozen=True, slots=True)
class Lease:
    """One worker's claim on one attempt of a job. Every write a worker makes about a job it
    runs names its lease, and changes nothing unless the row is still running, locked by that
    worker, at that attempt: a reclaimed job, or a later attempt, is never settled by a
    worker that lost it (fencing)."""

    job_id: UUID
    worker_id: UUID
    attempt: int


_Row = TypeVar("_Row", "JobRow", "JobSummary", "EnqueueArgs")

_BUILDERS: dict[type, Callable[[Sequence[Any]], Any]] = {}  # from_values's, per class


def from_values(cls: type[_Row], values: Sequence[Any]) -> _Row:
    """An instance of a frozen, slotted dataclass from every field's value in declaration order.

    The values must already have the right types: no ``__init__`` runs. Backends and the client
    build one JobRow / EnqueueArgs per job of a batch, and the generated ``__init__`` (keyword
    arguments, one ``object.__setattr__`` per field) cost two to three times as much.
    """
    build = _BUILDERS.get(cls)
    if build is None:
        build = _BUILDERS[cls] = _builder(cls)
    row: _Row = build(values)
    return row


def _builder(cls: type) -> Callable[[Sequence[Any]], Any]:
    """``from_values`` for ``cls``: one call of each field's slot descriptor, unrolled (a loop
    over them cost 40% more), generated once per class as dataclasses generates
    ``__init__``."""
    names = [f.name for f in fields(cls)]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = [
        "def build(values):",
        f"    if len(values) != {len(names)}:",
        f"        raise ValueError('{cls.__name__} takes {len(names)} values')",
        "    row = new(cls)",
    ]
    for index, name in enumerate(names):
        scope[f"set_{index}"] = getattr(cls, name).__set__
        lines.append(f"    set_{index}(row, values[{index}])")
    lines.append("    return row")
    exec("\n".join(lines), scope)
    build: Callable[[Sequence[Any]], Any] = scope["build"]
    return build


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What went wrong in an attempt."""

    error_class: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One execution attempt (``job_attempts``). A success's is not written: the reads give
    it back from the job row, with id ``history.SUCCESS_ROW_ID`` (0)."""

    id: int
    job_id: UUID
    attempt: int
    worker_id: UUID | None
    # succeeded|failed|retried|snoozed|retry_after|cancelled|interrupted|crashed|abandoned|lost
    outcome: str
    started_at: datetime | None
    finished_at: datetime
    duration_ms: float | None
    error_class: str | None
    error_message: str | None
    error_traceback: str | None


@dataclass(frozen=True, slots=True)
class EventRow:
    """One audit event (``job_events``): a state change, a cancel request or a reclaim.

    Every status change has exactly one event; creation (enqueue) has none. A success's
    (``running -> succeeded``) is not written: ``get_events`` reads it from the job row, with
    id ``history.SUCCESS_ROW_ID`` (0) and the job's finish as its time. On PostgreSQL a claim
    (``pending -> running``) is read from the row too while its attempt runs and once it
    succeeded; an attempt that ends otherwise writes it then, dated at the claim. Kinds:
    ``state_change`` (dispatch, terminal and rescheduling writes, sweeps, release, isolation,
    operator retry; also the cancel escalation 1 -> 2, as running -> running),
    ``cancel_request`` (pending/scheduled -> cancelled at once, or running -> running with
    cancel_phase 1), ``replaced`` (a waiting job took a new enqueue's payload and start:
    ``on_conflict="replace"``) and ``reclaim`` (the expired-lock sweep; detail has from_state,
    to_state, reason='lock_expired' and worker_id).
    """

    id: int
    job_id: UUID
    occurred_at: datetime
    kind: str  # state_change | cancel_request | replaced | reclaim
    from_status: JobStatus | None
    to_status: JobStatus | None
    worker_id: UUID | None
    detail: dict[str, Any]


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
class ActorConfigRow:
    """An ``actor_config`` row (capacity fields are operator-owned).

    The retry policy and priority are the code's, written at every worker start; None until
    a worker that knows them has started.
    """

    # Repeated on purpose by ActorDeclaration (the same less the timestamps: what the code
    # declares) and by the memory backend's ActorConfigRecord (a mutable row).
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


def stored_retry(row: ActorConfigRow) -> RetryPolicy | None:
    """The retry policy a worker wrote for the actor, or None when none has yet.

    Only what a job row carries (kind, attempts, time budget); backoff is applied by the
    worker that runs the job, from its own code.
    """
    if row.retry_kind is None or row.max_attempts is None:
        return None
    return RetryPolicy(
        kind=row.retry_kind, max_attempts=row.max_attempts, time_budget=row.retry_time_budget
    )
