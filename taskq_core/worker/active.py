"""What this worker holds: every job from its claim to its settled write, with its lease.

State model, per held job:

    CLAIMED  (dispatched, waiting in the local queue for a consumer; started_at NULL)
      --a consumer takes it--> RUNNING (the body runs; its start mark is queued)
      --the body ended--> SETTLING (its outcome is being written) --written--> released

Every held job's lease is renewed by the heartbeat, and only those: the database is told
exactly which (job, attempt) pairs this worker still holds. A holding whose lease is refused
(reclaimed, a later attempt) or given up (the heartbeat was lost) is marked ``lost``: a
claimed one is skipped, a running one is cancelled, and no write is made for it; the
reclaimed attempt wins. A second claim of a job still held here supersedes the stale
holding the same way, so the worker never writes twice for one lease.

The worker also knows, on its own monotonic clock, how long each lease surely lasts: the
database keeps it at least TASKQ_LOCK_LEASE past the start of its last confirmed renewal
(``renewed_at``). ``LeaseTerms.deadline`` takes one heartbeat interval off that: past it the
lease may be gone (the leader may have reclaimed the job, another worker may run it), so
no body starts on it and a stall past it loses it.

A body is tracked apart from its holding (``body_of``), from its start until it really
ended: an async body once its task is done, a plain ``def`` body once its thread returned,
even when its holding was superseded or written off meanwhile. A job claimed again while an
earlier body of it still runs here waits for that body before its own starts.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from taskq_core.actors import JobContext
from taskq_core.backend.protocol import JobRow, Lease
from taskq_core.worker.pace import BodyPace

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from taskq_core.backend.protocol.workflows import Upstream


# CancelPhase and Stage: plain enums, alike di.py's Scope and protocol/batches.py's BatchStatus
# by shape only (other members).
class CancelPhase(IntEnum):
    """Cancel progress of one job. ABANDON_PENDING never reaches the database."""

    NONE = 0
    COOPERATIVE = 1
    FORCED = 2
    ABANDON_PENDING = 3


class Stage(StrEnum):
    """Where a held job is (see the module docstring)."""

    CLAIMED = "claimed"
    RUNNING = "running"
    SETTLING = "settling"


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """How long the database keeps a lease past its renewal (TASKQ_LOCK_LEASE), and the
    margin the worker keeps off its end (one heartbeat interval: the time a renewal may take
    to be confirmed). The default never expires: for holdings no heartbeat renews."""

    lease: float = math.inf
    margin: float = 0.0

    def deadline(self, renewed_at: float) -> float:
        """The monotonic time past which a lease renewed at ``renewed_at`` may be gone."""
        return renewed_at + self.lease - self.margin


@dataclass(eq=False, slots=True, weakref_slot=True)
class ActiveJob:
    """One held job: its row and lease, when the lease was last renewed, and, once running,
    its context, the task running the actor and its cancel state."""

    job: JobRow
    lease: Lease
    renewed_at: float  # monotonic; the database keeps the lease at least lock_lease past it
    stage: Stage = Stage.CLAIMED
    lost: str | None = None  # why the lease is no longer ours; nothing is written for it
    ctx: JobContext[Any] | None = None
    task: asyncio.Task[Any] | None = None
    in_thread: bool = False  # a plain ``def`` actor: a forced cancel cannot stop its thread
    cancel_phase: CancelPhase = CancelPhase.NONE
    cancel_observed_at: float | None = None
    cancel_reason: str = "requested"  # requested | shutdown | lease_lost
    started_monotonic: float = 0.0
    settled: asyncio.Future[None] | None = None  # the consumer waits on it
    dispatch_span: SpanContext | None = None  # the claim's DISPATCH span, linked from CONSUMER
    thread: asyncio.Future[Any] | None = None  # a plain ``def`` body's thread, once it runs
    body_ran: bool = False  # the actor's function was called (its lease checked just before)
    start_written: bool = False  # its start was written, awaited, before the body (a job
    # reclaimed unstarted before): that write confirmed the lease
    ended_monotonic: float | None = None  # when the body really stopped
    body_ended: asyncio.Future[None] | None = None  # made only for a claim that waits on it
    # A workflow step's dependencies, read with the rest of its claimed batch (worker.upstream).
    upstream_read: asyncio.Future[dict[UUID, dict[str, Upstream]]] | None = None

    def ran_for(self, now: float) -> float:
        """Seconds the body has run by ``now`` (monotonic)."""
        return max(0.0, now - self.started_monotonic)

    def abandon(self) -> None:
        """Release the waiting consumer: its task ended, or ignored even the forced cancel."""
        if self.settled is not None and not self.settled.done():
            self.settled.set_result(None)


class ActiveJobs:
    """Every job this worker holds. ``len()`` counts the running ones; ``idle`` is set
    whenever none runs; ``slot_freed`` whenever a consumer or a held job's slot frees up."""

    def __init__(self, terms: LeaseTerms | None = None) -> None:
        self.terms = terms or LeaseTerms()
        self._held: dict[UUID, ActiveJob] = {}
        self._bodies: dict[UUID, ActiveJob] = {}  # job id -> the holding whose body runs
        self._running = 0
        self._settling = 0  # held jobs in SETTLING: in_flight is read per dispatch, kept O(1)
        self.changes = 0  # claims and releases so far: a reader can tell whether any happened
        self.pace = BodyPace()  # how long bodies run: how far ahead the producer claims
        self.idle = asyncio.Event()
        self.idle.set()
        self.slot_freed = asyncio.Event()

    def claim(
        self, job: JobRow, renewed_at: float, dispatch_span: SpanContext | None = None
    ) -> tuple[ActiveJob, ActiveJob | None]:
        """Hold a freshly claimed job; returns it and the stale holding it supersedes."""
        assert job.locked_by_worker is not None
        lease = Lease(job.id, job.locked_by_worker, job.attempt)
        held = ActiveJob(job, lease, renewed_at, dispatch_span=dispatch_span)
        stale = self._held.get(job.id)
        if stale is not None:
            self.remove(stale)
        self._held[job.id] = held
        self.changes += 1
        return held, stale

    def start(self, held: ActiveJob, now: float) -> None:
        """CLAIMED -> RUNNING."""
        held.stage = Stage.RUNNING
        held.started_monotonic = now
        self._running += 1
        self.idle.clear()

    def expired(self, held: ActiveJob, now: float) -> bool:
        """Whether ``held``'s lease may be gone by ``now`` (monotonic): see ``LeaseTerms``."""
        return now >= self.terms.deadline(held.renewed_at)

    def body_began(self, held: ActiveJob) -> None:
        """Track ``held``'s body from now until ``body_stopped``."""
        self._bodies[held.job.id] = held

    def body_stopped(self, held: ActiveJob, now: float) -> None:
        """``held``'s body really stopped (idempotent)."""
        if held.ended_monotonic is not None:
            return
        held.ended_monotonic = now
        self.pace.ran(now - held.started_monotonic)
        if self._bodies.get(held.job.id) is held:
            del self._bodies[held.job.id]
        if held.body_ended is not None:
            held.body_ended.set_result(None)

    def body_of(self, job_id: UUID) -> ActiveJob | None:
        """The holding whose body of ``job_id`` still runs here, superseded or not."""
        return self._bodies.get(job_id)

    @staticmethod
    def body_end(held: ActiveJob) -> asyncio.Future[None]:
        """A future done once ``held``'s body stopped (made on demand: bodies nobody waits
        for cost no future)."""
        if held.body_ended is None:
            held.body_ended = asyncio.get_running_loop().create_future()
            if held.ended_monotonic is not None:
                held.body_ended.set_result(None)
        return held.body_ended

    def settle(self, held: ActiveJob) -> None:
        """RUNNING -> SETTLING: the body ended; its consumer slot is free. Its context and
        task are let go: a holding may wait a while for its write and its batch's hook, and
        what it keeps then is what the garbage collector walks."""
        held.ctx = None
        held.task = None
        if held.stage is Stage.RUNNING:
            self._stopped_running()
        if held.stage is not Stage.SETTLING and self._held.get(held.job.id) is held:
            self._settling += 1
        held.stage = Stage.SETTLING

    def remove(self, held: ActiveJob) -> None:
        """Stop holding ``held`` (idempotent; a holding that was superseded is left alone)."""
        if self._held.get(held.job.id) is held:
            del self._held[held.job.id]
            self.changes += 1
            if held.stage is Stage.SETTLING:
                self._settling -= 1
        if held.stage is Stage.RUNNING:
            self._stopped_running()
            held.stage = Stage.SETTLING
        self.slot_freed.set()

    def _stopped_running(self) -> None:
        self._running -= 1
        self.slot_freed.set()
        if not self._running:
            self.idle.set()

    def get(self, job_id: UUID) -> ActiveJob | None:
        """The holding of a job, if any."""
        return self._held.get(job_id)

    def all(self) -> list[ActiveJob]:
        """A snapshot of every holding."""
        return list(self._held.values())

    def running(self) -> list[ActiveJob]:
        """A snapshot of the holdings whose bodies run."""
        return [held for held in self._held.values() if held.stage is Stage.RUNNING]

    def leases(self) -> list[ActiveJob]:
        """The holdings whose leases the heartbeat renews: every one not lost."""
        return [held for held in self._held.values() if held.lost is None]

    def in_flight(self) -> int:
        """Claimed or running jobs: what counts against the worker's capacity."""
        return len(self._held) - self._settling

    def holding(self) -> int:
        """Every job held, settling ones included: an outcome being written is not counted
        in the worker's stats yet."""
        return len(self._held)

    def __len__(self) -> int:
        return self._running
