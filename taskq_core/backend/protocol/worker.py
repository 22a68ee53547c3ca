"""What a worker needs of a backend: claim jobs, hold their leases, settle every outcome fenced by
the lease, register itself, and hear wake-ups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.values import (
    ErrorInfo,
    JobRow,
    Lease,
    RetryAfterOutcome,
    RetryKind,
    SnoozeOutcome,
)
from taskq_core.statemachine import JobStatus

_Subscriber = TypeVar("_Subscriber")


class ScheduledAnnouncements:
    """What a ``subscribe_scheduled`` subscriber heard: ``event`` is set at each announcement,
    ``take()`` returns when the earliest job announced since the last take is due (on
    ``time.monotonic()``: the moment it was heard plus how soon it was said to be due) and
    clears both. A backend calls ``announce``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._earliest: float | None = None

    def announce(self, due_in: float) -> None:
        """A job waits until ``due_in`` seconds from now."""
        due_at = time.monotonic() + max(due_in, 0.0)
        if self._earliest is None or due_at < self._earliest:
            self._earliest = due_at
        self.event.set()

    def take(self) -> float | None:
        """The earliest due time announced since the last take (None: none), and clear."""
        earliest, self._earliest = self._earliest, None
        self.event.clear()
        return earliest

    @classmethod
    def held_in(
        cls, subscribers: set[ScheduledAnnouncements]
    ) -> AbstractContextManager[ScheduledAnnouncements]:
        """A new subscriber, among ``subscribers`` for the block (a backend's
        ``subscribe_scheduled``)."""
        return subscribed(subscribers, cls())


@contextmanager
def subscribed(subscribers: set[_Subscriber], subscriber: _Subscriber) -> Iterator[_Subscriber]:
    """``subscriber`` among ``subscribers`` for the block: how both backends hold whoever
    listens for a wake-up (``subscribe_wake``, ``subscribe_cancel_wake``, the scheduled)."""
    subscribers.add(subscriber)
    try:
        yield subscriber
    finally:
        subscribers.discard(subscriber)


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
    which dates its start when that was not recorded yet. ``ephemeral``: the job is deleted
    (its events and attempts with it) instead of kept as succeeded (an ``ephemeral`` actor's
    job that nothing reads after its end).
    """

    job_id: UUID
    attempt: int
    result_json: str | None
    fallback_result_ttl: timedelta | None = None
    ran_for: float = 0.0
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Denied:
    """A claimed job a limit held back before its body began, for ``mark_denied_many``: due
    again in ``delay``; ``reason`` names the limit (the event's detail)."""

    job_id: UUID
    attempt: int
    delay: timedelta
    reason: str


@dataclass(frozen=True, slots=True)
class LostAttempt:
    """A body that ran under a lease its worker lost before the outcome was written, for
    ``record_lost_attempts``: it started ``started_ago`` and ended ``ended_ago`` seconds
    before the write, and ``reason`` says how the lease was lost."""

    job_id: UUID
    attempt: int
    started_ago: float
    ended_ago: float
    reason: str


def first_success_per_job(successes: Sequence[Success]) -> list[Success]:
    """``successes`` with a job listed twice kept at its first entry only: which of two
    rows an UPDATE joins is undefined in Postgres, so both backends settle the first."""
    seen: dict[UUID, Success] = {}
    for success in successes:
        seen.setdefault(success.job_id, success)
    return list(seen.values())


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
    ``registered``: the worker's row was there to touch. False once the leader's stale-worker
    cleanup deleted it while the worker was silent (a host suspended for a day): the worker
    then registers again.
    """

    held: frozenset[UUID]
    extended: frozenset[UUID]
    cancel_flags: list[CancelFlag]
    registered: bool = True

    @property
    def leases_extended(self) -> int:
        """How many leases were renewed."""
        return len(self.extended)


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
class ActorDeclaration:
    """An actor as the code declares it, for ActorConfig sync.

    The retry policy and priority are what a by-name enqueue from a process without the actor
    needs; every sync writes them (the code owns them: never drift). None leaves them unset.
    """

    # ActorConfigRow's fields less its timestamps, on purpose: the row holds what this declares.
    actor: str
    queue: str
    metadata: dict[str, Any]
    max_concurrent: int | None
    max_pending: int | None
    result_ttl: timedelta | None
    retry_kind: RetryKind | None = None
    max_attempts: int | None = None
    retry_time_budget: timedelta | None = None
    priority: int | None = None


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


# Both backends restate these signatures on purpose (the package docstring says why); the
# contracts are written here only.
@runtime_checkable
class WorkerBackend(Protocol):
    """Claiming, leasing and settling jobs; the worker's own row and wake-ups."""

    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        """Atomically claim up to ``limit`` due pending jobs of ``queues``: -> running.

        Honours per-queue mode (strict_fifo / round_robin by fairness_key), paused queues,
        queue and actor ``max_concurrent`` (read every call), identity-key serialization.
        Sets attempt+1 (every claim: an attempt number is never given back, so no two bodies
        of a job share one and the lease changes with every claim), locked_by_worker,
        lock_expires_at = now() + lock_lease and claimed_at, and clears started_at: the worker
        records the start when the body begins.

        Rows come back in dispatch order. strict_fifo: priority DESC, scheduled_at, id.
        round_robin: the same order inside each fairness_key cohort (NULL keys form one
        cohort), cohorts interleaved by their rank (a job's rank counts the due jobs of its
        cohort ahead of it, leaving out those of actors at their cap); among jobs of equal
        rank and priority the cohort whose last job was claimed least recently in that queue
        goes first (never claimed: first), so dispatching one job at a time still alternates
        cohorts. Queues
        of different modes are served mode group by mode group, in the order given. Only
        ``pending`` rows with scheduled_at <= now() are due (scheduled jobs wait for
        ``promote_scheduled_jobs``).
        An actor's ``max_concurrent`` counts its running jobs in every queue; a queue's counts
        running jobs in that queue; at most one job per (actor, identity_key) runs at a time.
        Concurrent dispatchers may exceed a cap by at most (dispatchers - 1) * cap.

        A capped actor's backlog never keeps other actors' due jobs from being claimed. A call
        may claim fewer than ``limit`` jobs while more are due (PG reads bounded windows of
        candidates); later calls claim the rest.
        """

    async def release_leases(
        self,
        worker_id: UUID,
        leases: Sequence[Lease],
        *,
        reason: str,
        retry_delay: timedelta = timedelta(0),
        error: ErrorInfo | None = None,
        ran: Collection[UUID] = (),
    ) -> int:
        """Give back jobs this worker holds (a shutdown drain, a lost heartbeat): for each
        lease still the worker's, a job whose body never started (started_at None, and not
        in ``ran``: the jobs whose bodies the worker knows ran, start recorded or not) -> pending
        in its place (scheduled_at kept), its attempt uncounted and no attempt row; a
        started one gets a crashed attempt carrying ``error`` and -> scheduled at now() +
        ``retry_delay`` when retries are left (as in ``reclaim_expired_leases``), else
        crashed. A requested cancel ends either ``cancelled``. Each gets a state_change event
        (detail ``reason`` and ``started``); a wake when any went back to pending. Returns
        how many rows changed."""

    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        """One transaction: touch the worker row, extend the named leases that are still this
        worker's (and nothing else it owns: a row it no longer holds is left to expire), ping
        the leader row when leading, and read the cancel flags of the held jobs."""

    # Every write below changes nothing unless the row is running, locked by the lease's
    # worker, at the lease's attempt. A requested cancel wins over every rescheduling: a
    # retry, snooze, retry-after, interrupt or release of a job asked to cancel ends it
    # ``cancelled``. An attempt that spends no retry budget keeps its number and adds one
    # to ``uncounted_attempts`` (see ``JobRow.attempts_used``).
    # ``ran_for`` (seconds the body ran; None: it never ran) dates started_at when the
    # worker's start mark was not written yet.
    async def record_lost_attempts(self, worker_id: UUID, lost: Sequence[LostAttempt]) -> int:
        """Add an attempt row (outcome ``lost``, error_class LeaseLost, ``reason`` as the
        message) for each body that ran under a lease the worker lost, so the history lists
        every body that ran; none where the job already has a row for that attempt (its
        reclaim or release wrote one) or is gone. Writes nothing else: the job is whoever
        holds it now's. Returns how many rows were added."""

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
        returns the ids actually written (leases this worker lost are skipped; a job listed
        twice is settled by its first entry, see ``first_success_per_job``). An
        ``ephemeral`` success deletes the job with its attempts and events instead (a
        second statement, only when there is one). Result text that cannot be stored (not
        JSON, NaN, Infinity, a NUL) raises UnstorableValueError and writes nothing."""

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

    async def mark_interrupted(
        self, lease: Lease, *, reason: str = "shutdown", ran_for: float | None = None
    ) -> JobStatus | None:
        """A body a graceful shutdown stopped (it returned after its cancel_event, or its
        forced cancel ended it): -> pending in its place (scheduled_at kept), the attempt
        uncounted, attempt outcome ``interrupted``, event detail ``{"reason": reason}``; a
        requested cancel -> cancelled. Returns the job's new status (None: the lease is not
        the row's any more)."""

    async def mark_abandoned(self, lease: Lease, reason: str) -> JobStatus | None:
        """A running attempt with cancel_phase 2 whose body did not stop: attempt outcome
        ``abandoned``, ``reason`` the error message (error_class Abandoned) and the event's
        detail. An operator's cancel ends the job ``abandoned``; otherwise (a shutdown) the
        attempt counts like a crash and the job -> pending while retries remain, else
        abandoned. Returns the job's new status (None: not the row's lease, or not forced)."""

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        """running -> scheduled at now() + delay without spending budget (uncounted_attempts
        + 1, metadata snooze_count + 1, attempt outcome ``snoozed``); past schedule_to_close ->
        failed with DeadlineExceeded (attempt outcome ``failed``, counted); a requested
        cancel -> cancelled."""

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
        reason: str | None = None,
    ) -> RetryAfterOutcome:
        """Like snooze, but ``consume_budget`` counts the attempt: a transient job with no
        attempts left fails with MaxAttemptsExceeded. A requested cancel is checked first
        (-> cancelled), then the deadline. Without ``consume_budget`` the attempt is uncounted
        (uncounted_attempts + 1). Outcome ``retry_after``; no attempt row when the body never began
        (``ran_for`` None and no start recorded: a rate limit held the job back). ``reason``
        becomes the event's detail ``{"reason": reason}``; with a reason (a limit's hold) the
        job is due at the next multiple of ``constants.DENIAL_GRID`` on the backend's clock,
        never past schedule_to_close, so a limit's line comes due in steps."""

    async def mark_denied_many(
        self, worker_id: UUID, denials: Sequence[Denied]
    ) -> dict[UUID, RetryAfterOutcome]:
        """Each denial as ``mark_retry_after(lease, delay, consume_budget=False,
        reason=reason)`` of a body that never began (the worker's lease at the denial's
        attempt); the outcome of each, ``noop`` where the lease is not the row's any more.
        The rate limits' many denials go together."""

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        """Running jobs of this worker with a cancel requested, oldest request first."""

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert (or refresh) this worker's row, status running."""

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        """status stopped, stopped_at now."""

    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        """Create missing rows from the code; never overwrite capacity; report structural
        drift (queue, metadata), overwriting it only with ``force``. The retry policy and
        priority are written to every declared row (not drift), except when unforced drift
        refuses the start (existing rows then keep theirs). One transaction."""

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        """Whether any pending, scheduled or running job is in these queues (cheap on any
        backlog: the until-idle drain monitor asks it every poll)."""

    def subscribe_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever new dispatchable work may exist (wake NOTIFY)."""

    def subscribe_cancel_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever a cancel request is written (events NOTIFY)."""

    def subscribe_scheduled(self) -> AbstractAsyncContextManager[ScheduledAnnouncements]:
        """Announcements of jobs that wait for a time, as they are enqueued or rescheduled
        by a settle (a retry's backoff, a snooze, a retry-after, a release; events NOTIFY):
        how soon each is due, for the leader's promotion to wake on time."""
