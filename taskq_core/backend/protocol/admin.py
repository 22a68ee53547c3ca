"""What operators' tools (CLI, dashboard, explain) need of a backend: listings, counts, bulk
cancel and retry, queue and actor-config settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.values import (
    UNSET,
    ActorConfigRow,
    JobFilter,
    JobRow,
    JobSummary,
    QueueMode,
)
from taskq_core.errors import TaskqError
from taskq_core.statemachine import JobStatus

# A job id as 32 lowercase hex digits (its UUID without hyphens): what fragments match against.
JOB_ID_HEX_DIGITS = 32
_HEX_DIGITS = frozenset("0123456789abcdef")


class JobIdSearchTooSlowError(TaskqError):
    """A suffix search for a job id did not finish within its time bound (a very large
    table); a prefix or the whole id is found through the primary key instead."""


def normalize_id_fragment(fragment: str) -> str:
    """A job id fragment as ``list_job_ids_matching`` matches it: lowercase hex digits, hyphens
    dropped (``0196A3B2-7c`` and ``0196a3b27c`` are the same). ValueError when it is empty,
    holds anything but hex digits and hyphens, or is longer than an id."""
    digits = fragment.strip().replace("-", "").lower()
    if not digits or not set(digits) <= _HEX_DIGITS or len(digits) > JOB_ID_HEX_DIGITS:
        raise ValueError(f"{fragment!r} is not part of a job id (hex digits of a UUID)")
    return digits


# A time bound of a job search: an absolute moment, or an age on the backend's clock.
TimeBound = datetime | timedelta | None


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs ``search_jobs`` lists, one page at a time, newest first.

    Each of ``statuses``, ``queues`` and ``actors`` is None (any) or the values a job may
    have (an empty tuple matches nothing). ``created_since``/``created_until`` bound
    ``created_at`` (since inclusive, until exclusive): a datetime, or a timedelta meaning that
    long before the backend's now; ``finished_since``/``finished_until`` bound ``finished_at``
    the same way (a job not finished matches neither). ``batch_id`` keeps the children of
    one batch (``metadata.batch_id``). ``after`` is the ``next_after`` of the previous page.
    ``count_max`` bounds how many matches ``total`` counts.
    """

    statuses: tuple[JobStatus, ...] | None = None
    queues: tuple[str, ...] | None = None
    actors: tuple[str, ...] | None = None
    created_since: TimeBound = None
    created_until: TimeBound = None
    finished_since: TimeBound = None
    finished_until: TimeBound = None
    batch_id: UUID | None = None
    after: tuple[datetime, UUID] | None = None
    limit: int = 100
    count_max: int = 100_000

    def __post_init__(self) -> None:
        if self.limit < 0 or self.count_max < 0:
            raise ValueError("JobQuery: limit and count_max must not be negative")


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of ``search_jobs``: the jobs, how many match the query in all (without
    ``after``; at most ``count_max``, ``total_exact`` False when it stopped there), and the
    ``after`` of the next page (None on the last page)."""

    jobs: list[JobSummary]
    total: int
    total_exact: bool
    next_after: tuple[datetime, UUID] | None


@dataclass(frozen=True, slots=True)
class Audit:
    """Who made an operator write (``user@host`` as the operator's tool gives it) and why.

    Every job event the write produces carries it in its detail (``by``, and ``why`` when
    given); a write that leaves no job behind (a purge) or touches no job (an actor-config
    change) records it in the operator log (``list_operator_log``).
    """

    by: str | None
    reason: str | None = None

    def detail(self) -> dict[str, str]:
        """The keys an event's detail gains: ``by`` and ``why``, the ones known."""
        found = {"by": self.by, "why": self.reason}
        return {key: value for key, value in found.items() if value is not None}


# What an operator's settle of a running job does: ``requeue`` takes the attempt from its
# worker now, as the reclaim sweep does when a lease expires; ``fail`` ends the job failed.
ForcedEnd = Literal["requeue", "fail"]

# The error a job ends its attempt with when an operator requeues or fails it.
OPERATOR_REQUEUED = "OperatorRequeued"
OPERATOR_FAILED = "OperatorFailed"


@dataclass(frozen=True, slots=True)
class ForcedEndResult:
    """Outcome of ``end_running_job``: ``job`` as it is after the call (None: no such job),
    and whether this call settled it (False: it was not running, or its worker settled it
    first)."""

    job: JobRow | None
    settled: bool


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """Outcome of ``purge_where``: jobs deleted per status (only statuses with jobs), and
    how many running jobs the filter matched and were left alone."""

    deleted: dict[JobStatus, int]
    running_skipped: int

    @property
    def total(self) -> int:
        """How many jobs were deleted."""
        return sum(self.deleted.values())


@dataclass(frozen=True, slots=True)
class OperatorLogEntry:
    """One row of the operator log: an operator write that no job event records (a purge,
    an actor-config change), with who, why and what (``detail``)."""

    id: int
    occurred_at: datetime
    action: str  # purge | actor_config_set | queue_update | worker_ack
    target: str | None  # the actor or queue changed; None for a purge
    by: str | None
    reason: str | None
    detail: dict[str, Any]


# The statuses ``move_where`` moves: waiting jobs, which no worker holds yet.
MOVABLE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.SCHEDULED})
# The statuses ``purge_where`` deletes: every one but running (a worker holds the job; cancel
# or requeue it first).
PURGEABLE_STATUSES = frozenset(JobStatus) - {JobStatus.RUNNING}


# Alike batches.py's BatchOutcome by shape only: a two-field frozen record, other data.
@dataclass(frozen=True, slots=True)
class BulkCancelResult:
    """Outcome of ``cancel_where``: cancelled at once vs. flagged for their running worker."""

    cancelled: int
    requested: int


@dataclass(frozen=True, slots=True)
class QueueStatusCount:
    """Jobs of one status in one queue."""

    queue: str
    status: JobStatus
    count: int


@dataclass(frozen=True, slots=True)
class ReadStaleness:
    """How far behind its primary the standby a backend reads is, read on the standby.

    ``behind``: seconds between the last change replayed and now while changes received
    wait to be replayed, 0 when everything received is replayed (None: the standby has
    replayed nothing yet). ``streaming``: a WAL receiver runs; when it does not, the
    standby has lost its primary and nothing bounds how stale it is but
    ``last_replayed_at`` (the commit time of the last change replayed).
    """

    behind: float | None
    streaming: bool
    last_replayed_at: datetime | None


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
    # How its process ended, as the workgroup supervisor saw it (both None: nobody saw it).
    exit_code: int | None = None
    exit_signal: str | None = None  # "SIGKILL"
    # An operator acknowledged its silence (see ``liveness.silence_acknowledged``).
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None


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
class QueuePause:
    """Who paused a queue (``user@host`` as the operator's tool gave it), when (the
    backend's clock) and why; any of who and why may be unknown."""

    paused_at: datetime
    paused_by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue as operators see it: its settings (defaults when no row) and job counts.

    ``counts`` holds only the statuses that have jobs, in JobStatus order. ``claimed``: how
    many of ``counts[RUNNING]`` are claimed ahead of a free consumer, their bodies not
    started (the rest run). ``pause`` is the note of the pause in force (None when the queue
    runs, or was paused without one).
    """

    name: str
    mode: QueueMode
    max_concurrent: int | None
    paused: bool
    has_row: bool
    counts: dict[JobStatus, int]
    pause: QueuePause | None = None
    claimed: int = 0


RECENT_JOBS_MAX = 200
# How many due scheduled jobs (oldest first) the dashboard reads to find each queue's
# longest-due one: a bound on the read when no leader promotes a large backlog.
DUE_SCHEDULED_SCAN = 1000


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
    ``oldest_claimed_at``: the ``claimed_at`` of the claimed job that has waited longest for
    a consumer (None when none is claimed). ``oldest_due_scheduled_at``: the ``scheduled_at``
    of the longest-due job still scheduled (None when none is due; only the promotion
    sweep's backlog is read, up to ``DUE_SCHEDULED_SCAN`` jobs across queues, oldest first).
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
    oldest_claimed_at: datetime | None = None
    oldest_due_scheduled_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DashboardStats:
    """Everything the dashboard's queue pane and header need, from one read.

    ``queues`` holds every queue that has jobs or a row in ``queues``, by name. ``now`` is
    the backend's clock at the read; ages and the per-minute buckets are relative to it.
    """

    now: datetime
    window: timedelta
    queues: list[QueueActivity]


# Both backends restate these signatures on purpose (the package docstring says why); the
# contracts are written here only.
@runtime_checkable
class AdminBackend(Protocol):
    """Operator reads and writes over many jobs, queues, workers and actor configs."""

    async def cancel_where(
        self, filter: JobFilter, reason: str | None, *, audit: Audit | None = None
    ) -> BulkCancelResult:
        """``write_cancel_request`` for every non-terminal job the filter matches (newest
        ``filter.limit`` of them); running jobs already asked to cancel are not counted.
        With ``audit``, every event written carries it (see Audit)."""

    async def retry_where(self, filter: JobFilter, *, audit: Audit | None = None) -> int:
        """``retry_job`` for every retryable job the filter matches; returns the count.
        With ``audit``, every event written carries it."""

    async def end_running_job(self, job_id: UUID, end: ForcedEnd, audit: Audit) -> ForcedEndResult:
        """An operator settles a running job now, by the rules of every settle, fenced like
        a worker's write (the lease read with the row must still be the row's):

        ``requeue`` does what the reclaim sweep does to an expired lease: a started attempt
        ends ``crashed`` (error OPERATOR_REQUEUED) and the job is pending at once while it
        has retries left, else crashed; a claimed, unstarted job gets its attempt back; a
        requested cancel ends it cancelled. The event is a ``reclaim`` (detail reason
        ``operator_requeue``). ``fail`` ends it ``failed`` (error OPERATOR_FAILED) with a
        failed attempt. Either way the worker that held it loses its lease: its later
        writes change nothing and its heartbeat sees the job gone. The event carries
        ``audit``. A job that is not running is left as it is (``settled`` False).
        """

    async def move_where(self, filter: JobFilter, to_queue: str, audit: Audit) -> int:
        """Move the waiting jobs (MOVABLE_STATUSES) the filter matches (its limit applies)
        to ``to_queue``, keeping their place in time (scheduled_at) and priority; one
        ``queue_move`` event each (detail from_queue, to_queue and ``audit``) and a wake.
        Returns how many moved; jobs in other statuses are not touched."""

    async def purge_where(self, filter: JobFilter, audit: Audit) -> PurgeResult:
        """Delete the jobs the filter matches (its limit applies) in PURGEABLE_STATUSES,
        with their attempts and events; running ones are counted and left. One operator
        log entry (action ``purge``) records who, why, the filter and the counts."""

    async def list_operator_log(
        self, *, action: str | None = None, target: str | None = None, limit: int = 100
    ) -> list[OperatorLogEntry]:
        """Operator log entries, newest first (only those of ``action`` and ``target`` when
        given)."""

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        """Job counts per (queue, status), by queue then status in JobStatus order."""

    async def count_jobs(self, filter: JobFilter) -> int:
        """How many jobs ``list_jobs(filter)`` would return, counted without reading them
        (at most ``filter.limit`` when it is set)."""

    async def list_job_ids_matching(self, fragment: str, limit: int) -> list[UUID]:
        """Ids of jobs (live or archived) whose 32-hex-digit form starts or ends with
        ``fragment`` (see ``normalize_id_fragment``; ValueError when it is not hex), at most
        ``limit`` of them, ordered by id. How an operator names a job by a copied piece of
        its id; the caller decides what an ambiguous answer means.

        PG cost: the prefix match is a range read of each table's primary key (cheap at any
        size). The suffix match cannot use an index: it scans the ids of ``jobs`` and
        ``jobs_archive`` (stopping at ``limit`` matches), so on a table of millions of rows
        it reads all of them when nothing matches; it is bounded by a statement timeout and
        raises JobIdSearchTooSlowError past it.
        """

    async def search_jobs(self, query: JobQuery) -> JobPage:
        """A page of the jobs the query matches, newest first (``created_at DESC, id
        DESC``), with their total and the cursor of the next page (see JobQuery, JobPage).
        Time bounds given as ages are read on the backend's clock. The jobs are summaries:
        no payload, result or traceback is read (``get`` has them).

        PG: the page walks ``jobs_created_idx`` (or a filter's own index) and stops at the
        limit; the total counts the matches up to ``count_max``, which on a large table reads
        that many index entries or rows.
        """

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        """The job's place in its queue's dispatch order (see DispatchPosition); None when
        there is no such job. An operator read (``taskq jobs explain``), not a hot path."""

    async def get_dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        """Per-queue activity for a live dashboard, cheap on a large table.

        Exact pending/scheduled/running/claimed counts, the oldest pending job's
        ``scheduled_at``, terminal jobs per status finished within ``window``, and
        ``minutes`` per-minute counts of finished jobs. PG: every read of ``jobs`` walks an
        index (loose index scans find the queues; counts are index-only where the
        visibility map allows).
        ``window`` must be positive and ``minutes`` between 1 and 1440 (ValueError).
        """

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobSummary]:
        """Jobs matching the filter, most recent activity first: finished jobs by
        ``finished_at``, running ones by ``started_at`` (claimed ones by ``claimed_at``),
        waiting ones by ``created_at`` (ties: id DESC); summaries, as ``search_jobs``'.

        Each status is read from its own index, newest first, so the read stays bounded on
        a large table; this is the dashboard's jobs pane, where ``list_jobs`` is the full
        listing. ``filter.limit`` must be between 0 and RECENT_JOBS_MAX and ``filter.ids``
        unset (ValueError).
        """

    async def list_workers(self) -> list[WorkerRow]:
        """Every worker row, most recently seen first."""

    async def get_read_staleness(self) -> ReadStaleness | None:
        """How stale this backend's reads may be: None when it reads a primary (nothing
        replicated; the in-memory backend always), else its standby's ReadStaleness."""

    async def mark_worker_exited(
        self, worker_id: UUID, exit_code: int | None, exit_signal: str | None
    ) -> bool:
        """Whoever saw the worker's process end (the workgroup supervisor) records how: the
        row is stopped (``stopped_at`` now, unless the worker had marked itself stopped) with
        ``exit_code`` or ``exit_signal``. False when there is no such row (it never
        registered, or was deleted)."""

    async def mark_worker_acknowledged(
        self, worker_id: UUID, last_seen_at: datetime, audit: Audit
    ) -> bool:
        """An operator acknowledges the silence of a worker last seen at ``last_seen_at``:
        ``acknowledged_at`` (now) and ``acknowledged_by`` (``audit.by``) are set, and an
        operator log entry (action ``worker_ack``, target the worker id, detail
        ``last_seen_at``) commits with them. Fenced like a worker write: nothing is written
        (False) unless the row is still running and still last seen at ``last_seen_at`` (a
        heartbeat since, or a stop, makes the caller's judgement of it stale)."""

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        """Every actor_config row by name."""

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
        audit: Audit | None = None,
    ) -> ActorConfigRow | None:
        """Set (value) or clear (None) capacity fields; UNSET leaves a field. None if no row.
        With ``audit``, an operator log entry (action ``actor_config_set``, target the actor,
        detail ``{field: {from, to}}`` of what changed) is written with the change."""

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
        paused_by: str | None = None,
        pause_reason: str | None = None,
        audit: Audit | None = None,
    ) -> QueueRow:
        """Upsert a queue row; UNSET leaves a field; ``max_concurrent=None`` clears it.
        With ``audit``, an operator log entry (action ``queue_update``, target the queue,
        detail ``{"changed": {field: {from, to}}}``) commits with the change.

        ``paused=True`` records a pause note (now on the backend's clock, ``paused_by``,
        ``pause_reason``), replacing an earlier one; ``paused=False`` clears it. ``paused_by``
        and ``pause_reason`` are ignored unless ``paused`` is True.
        """
