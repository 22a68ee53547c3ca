"""What batches need of a backend: the batch row, the outcome hook, counts and the sweeps.

A batch is a group of jobs enqueued together whose children carry ``metadata.batch_id``. A
``batches`` row exists only when the caller gave a failure policy or a finalizer: it tracks
``consecutive_failures`` and moves ``active -> complete`` (every child terminal) or
``active -> aborted`` (``consecutive_failures`` reached ``failure_threshold``). Aborting
cancels the batch's pending and scheduled children; running ones finish. The moment a batch
leaves ``active`` its finalizer (if any) is enqueued, once, in the same transaction: two
workers settling the last two children at the same moment still make one finalizer. The
finalizer is not a child: it carries ``metadata.finalizes_batch``, not ``batch_id``.

The hook (``apply_batch_outcomes``) runs after the terminal writes committed, so the last
child's hook always sees every sibling terminal; ``complete_stale_batches`` is the safety net
for a hook that never ran (a worker killed between its write and its hook, a child ended by an
operator or a leader sweep). Time predicates run on the backend's clock.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.sizes import check_enqueue_payload
from taskq_core.backend.protocol.values import EnqueueArgs, JobSummary
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus

# The metadata keys a batch writes: on every child, and on the finalizer.
BATCH_ID_KEY = "batch_id"
FINALIZES_KEY = "finalizes_batch"
# The error_message of a child cancelled because its batch aborted (a fixed literal).
BATCH_ABORT_MESSAGE = "Batch aborted due to consecutive failures"


# Alike worker/active.py's Stage and LeaseTerms by shape only: a StrEnum, then a frozen record.
class BatchStatus(StrEnum):
    ACTIVE = "active"
    COMPLETE = "complete"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch row to create with its children (in the same transaction).

    ``failure_threshold``: abort after that many consecutive failed children (None: never).
    ``expected_size``: how many children it has (the hook counts their outcomes down from
    it before it looks for unfinished ones).
    ``finalizer``: the job to enqueue once when the batch leaves ``active``; its ``job_id``
    is fixed here (the backend enqueues it under that id, so the job is made once) and its
    metadata already carries ``finalizes_batch``.
    """

    id: UUID
    queue: str
    expected_size: int
    failure_threshold: int | None = None
    finalizer: EnqueueArgs | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.failure_threshold is not None and self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, got {self.failure_threshold}")
        if self.expected_size < 0:
            raise ValueError(f"expected_size must be zero or more, got {self.expected_size}")
        if self.finalizer is not None and self.finalizer.job_id is None:
            raise ValueError("the finalizer's job_id must be fixed when the batch is made")


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One ``batches`` row. ``finalizer_job_id`` is set once the finalizer was enqueued;
    ``finalizer_actor`` names the finalizer declared (None: no finalizer)."""

    id: UUID
    queue: str
    status: BatchStatus
    expected_size: int
    consecutive_failures: int
    failure_threshold: int | None
    finalizer_actor: str | None
    finalizer_job_id: UUID | None
    created_at: datetime
    completed_at: datetime | None
    metadata: dict[str, Any]


class ChildCounts:
    """What a batch's children by status (``by_status``) add up to; the counting half of
    BatchCounts and of the public BatchCompletionStatus."""

    __slots__ = ()
    by_status: Mapping[JobStatus, int]

    @property
    def total(self) -> int:
        """Every child."""
        return sum(self.by_status.values())

    @property
    def pending(self) -> int:
        """Children not yet terminal (pending, scheduled or running)."""
        return sum(n for status, n in self.by_status.items() if status in ACTIVE_STATUSES)

    def of(self, status: JobStatus) -> int:
        return self.by_status.get(status, 0)


@dataclass(frozen=True, slots=True)
class BatchCounts(ChildCounts):
    """The live children of a batch (the jobs table, not the archive) by status."""

    by_status: Mapping[JobStatus, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BatchFilter:
    """Which batches ``list_batches`` returns, newest first: ``active`` True for active only,
    False for complete and aborted; ``limit`` at most that many."""

    queue: str | None = None
    active: bool | None = None
    batch_id: UUID | None = None
    limit: int = 50

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit must be at least 1, got {self.limit}")


# Alike admin.py's BulkCancelResult by shape only: a two-field frozen record, other data.
@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """Terminal writes of a batch's children, as the hook receives them: ``count`` children,
    one after another, ended ``status`` (a worker's flush of successes is one outcome)."""

    batch_id: UUID
    status: JobStatus
    count: int = 1


@dataclass(frozen=True, slots=True)
class BatchTransition:
    """A batch that left ``active``: its new status, the children an abort cancelled and the
    finalizer enqueued (None: it has none)."""

    batch_id: UUID
    status: BatchStatus
    cancelled_children: int = 0
    finalizer_job_id: UUID | None = None


@runtime_checkable
class BatchBackend(Protocol):
    """Batch rows, the outcome hook and the batch sweeps."""

    async def create_batch(self, batch: NewBatch, *, connection: Any = None) -> BatchRow:
        """Insert the batch row (``active``). With ``connection`` it commits with the caller's
        transaction, which also inserts the children. The finalizer is stored, not enqueued.
        An existing id raises ValueError."""

    async def apply_batch_outcomes(self, outcomes: Sequence[BatchOutcome]) -> list[BatchTransition]:
        """The hook after terminal writes have committed, applied in the given order.

        For a batch with a row in ``active``: ``succeeded`` resets ``consecutive_failures`` to
        0; ``failed`` adds 1 and aborts once it reaches ``failure_threshold`` (pending and
        scheduled children -> cancelled with BATCH_ABORT_MESSAGE as error_message and
        cancel_reason, and a state_change event; later outcomes of the call no longer count);
        ``cancelled``/``crashed``/``abandoned`` leave the counter. Every outcome counts down
        the row's ``outcomes_left`` (``expected_size`` at creation); once it is 0 or less and
        no child is pending, scheduled or running, the batch is ``complete``: a big batch's
        hooks do not look at its children on every call. A count that is off (a child ended
        with no hook: a reclaim, a deadline, an operator's cancel) never ends a batch early;
        it leaves the end to a later hook or to ``complete_stale_batches``. A batch leaving
        ``active``
        gets ``completed_at`` (backend clock) and its finalizer enqueued in the same
        transaction, as ``enqueue`` would (idempotent on its fixed id); a finalizer whose
        unique key another job holds is refused as any enqueue is, and the batch ends without
        one (``finalizer_job_id`` stays None). Ids without a row, or a row already complete
        or aborted, change nothing; non-terminal statuses are ignored. Returns the batches
        that left ``active``, in the order they first appear in ``outcomes``.
        """

    async def get_batch(self, batch_id: UUID) -> BatchRow | None:
        """One batch row, or None."""

    async def count_batch_jobs(self, batch_id: UUID) -> BatchCounts:
        """The batch's children in the jobs table by status (whether or not it has a row)."""

    async def list_batch_jobs(
        self, batch_id: UUID, statuses: Collection[JobStatus] | None = None, limit: int = 20
    ) -> list[JobSummary]:
        """The batch's children in the jobs table (only those in ``statuses`` when given), the
        most recently finished first (children not finished yet by creation, newest first),
        at most ``limit``; summaries, as ``search_jobs``'."""

    async def list_batches(self, filter: BatchFilter) -> list[tuple[BatchRow, BatchCounts]]:
        """Batch rows matching the filter, newest first, each with its children's counts."""

    async def complete_stale_batches(self, limit: int = 100) -> list[BatchTransition]:
        """The leader's safety net: every active batch (at most ``limit``, oldest first) with
        no child pending, scheduled or running becomes ``complete`` (finalizer enqueued, as the
        hook does). An empty batch (expected_size 0) completes here. A batch a hook holds
        right now is skipped (that hook decides it). Returned oldest first."""

    async def prune_old_batches(self, older_than: timedelta, *, batch_size: int = 1000) -> int:
        """Delete complete and aborted batch rows whose ``completed_at`` is more than
        ``older_than`` ago (backend clock) and that have no child left in the jobs table, in
        batches of ``batch_size``; returns how many were deleted."""


def count_failures(
    consecutive_failures: int, failure_threshold: int | None, statuses: Iterable[JobStatus]
) -> tuple[int, bool]:
    """The outcome table's counter: ``statuses`` (in order) applied to an active batch's
    ``consecutive_failures``. A success resets it, a failure adds 1, other statuses leave it.
    Returns the new count and whether it reached ``failure_threshold`` (the batch aborts
    there: later statuses of the same call no longer count)."""
    count = consecutive_failures
    for status in statuses:
        if status is JobStatus.SUCCEEDED:
            count = 0
        elif status is JobStatus.FAILED:
            count += 1
            if failure_threshold is not None and count >= failure_threshold:
                return count, True
    return count, False


@dataclass(slots=True)
class BatchTally:
    """One batch's share of a hook call: its children's terminal statuses in order, as the
    failure counter reads them (a counted outcome's status once, but a failure once per
    child: only failures count one by one), and how many children ended."""

    statuses: list[JobStatus]
    ended: int = 0


def outcomes_by_batch(outcomes: Sequence[BatchOutcome]) -> dict[UUID, BatchTally]:
    """The terminal outcomes of ``outcomes`` per batch, each batch's in the given order, the
    batches in order of first appearance (non-terminal statuses dropped: not outcomes)."""
    grouped: dict[UUID, BatchTally] = {}
    for outcome in outcomes:
        status = outcome.status
        if status not in TERMINAL_STATUSES:
            continue
        tally = grouped.get(outcome.batch_id)
        if tally is None:
            tally = grouped[outcome.batch_id] = BatchTally([])
        tally.ended += outcome.count
        tally.statuses.extend([status] * (outcome.count if status is JobStatus.FAILED else 1))
    return grouped


def stored_finalizer(batch: NewBatch, max_payload_bytes: int) -> dict[str, Any] | None:
    """What ``create_batch`` stores of the batch's finalizer (None without one); a payload
    over the backend's limit is refused first (PayloadTooLargeError), nothing written."""
    if batch.finalizer is None:
        return None
    check_enqueue_payload(batch.finalizer, max_payload_bytes)
    return finalizer_to_json(batch.finalizer)


def finalizer_to_json(args: EnqueueArgs) -> dict[str, Any]:
    """A finalizer's EnqueueArgs as the jsonb the batch row stores (durations in seconds),
    every field: the finalizer is an ordinary job (its unique key holds as any job's)."""

    def seconds(value: timedelta | None) -> float | None:
        return None if value is None else value.total_seconds()

    return {
        "actor": args.actor,
        "payload": args.payload,
        "queue": args.queue,
        "priority": args.priority,
        "delay": seconds(args.delay),
        "identity_key": args.identity_key,
        "fairness_key": args.fairness_key,
        "schedule_to_close": seconds(args.schedule_to_close),
        "retry_kind": args.retry_kind,
        "max_attempts": args.max_attempts,
        "result_ttl": seconds(args.result_ttl),
        "metadata": args.metadata,
        "trace_id": args.trace_id,
        "span_id": args.span_id,
        "job_id": str(args.job_id),
        "unique_key": args.unique_key,
        "unique_for": seconds(args.unique_for),
    }


def finalizer_from_json(data: Mapping[str, Any]) -> EnqueueArgs:
    """The stored finalizer back as EnqueueArgs (the inverse of ``finalizer_to_json``)."""

    def delta(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    return EnqueueArgs(
        actor=data["actor"],
        payload=dict(data["payload"]),
        queue=data["queue"],
        priority=data["priority"],
        delay=delta(data["delay"]),
        identity_key=data["identity_key"],
        fairness_key=data["fairness_key"],
        schedule_to_close=delta(data["schedule_to_close"]),
        retry_kind=data["retry_kind"],
        max_attempts=data["max_attempts"],
        result_ttl=delta(data["result_ttl"]),
        metadata=dict(data["metadata"]),
        trace_id=data["trace_id"],
        span_id=data["span_id"],
        job_id=UUID(data["job_id"]),
        unique_key=data.get("unique_key"),
        unique_for=delta(data.get("unique_for")),
    )


def batch_id_of(metadata: Mapping[str, Any] | None) -> UUID | None:
    """The batch a job belongs to, from its metadata (None: not a batch child)."""
    if not metadata:
        return None
    return parse_batch_id(metadata.get(BATCH_ID_KEY))


def parse_batch_id(raw: object) -> UUID | None:
    """A ``metadata.batch_id`` value as a UUID (None: absent, or not a UUID)."""
    return None if raw is None else _batch_uuid(str(raw))


@functools.lru_cache(maxsize=1024)
def _batch_uuid(raw: str) -> UUID | None:
    """A batch id's text as a UUID, parsed once per batch (every child of a big batch asks)."""
    try:
        return UUID(raw)
    except ValueError:
        return None
