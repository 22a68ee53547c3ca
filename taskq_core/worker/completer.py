"""Completer: start marks and successful outcomes, written in batches, one flush at a time.

A consumer hands over a job's start (its body began) and, later, its success, and moves on at
once; a single flusher writes whatever waits: the starts in one ``mark_started_many``, the
successes in one ``mark_succeeded_many`` (attempts and events included). While one flush is in
flight the next batch accumulates, so batches grow with load and a lone write goes out at
once. A start whose success waits in the same flush is not written: the success dates it.
(A job the reclaim sweep gave back unstarted before is the exception: its consumer writes the
start itself, awaited, before the body runs; see ``admission.record_start``.)

Every write is fenced by the job's lease, so a success whose lease was lost meanwhile (the
job was reclaimed; another attempt may be running) is dropped with a log line: the reclaimed
attempt wins. Such a body still ran, so it is recorded in the attempt history as ``lost``
(``submit_lost``, also for bodies the consumer could not settle), with the next flush.
While the database is away the flusher backs off and keeps what waits; the producer claims
nothing new past ``backlog_limit`` waiting successes, which bounds memory.

The successes of batch children written by a flush go to the worker's batch hook
(``HookPipe``, owned here as ``hooks``) once the flush committed; those jobs are released
when the hook has applied them.

Crash semantics: a job is ``succeeded`` only once its flush has committed. If the worker dies
between the actor's return and that commit (at most one flush), the row is still running:
its lease expires, the leader reclaims it and it runs again under its retry policy
(at-least-once; ``JobContext.connection`` makes an actor's own writes exactly-once).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import Backend, ErrorInfo, LostAttempt, Start, Success
from taskq_core.clock import Clock
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.batch_hook import (
    HookPipe,
    Outcome,
    outcome_of,
    status_of_row,
    succeeded_children,
)
from taskq_core.worker.transient import (
    TRANSIENT_ERRORS,
    Backoff,
    DatabaseOutage,
    UnexpectedErrorGuard,
    retry_pause,
    shielded,
)

# Why a body's lease was lost, as its 'lost' attempt row says (ActiveJob.lost codes).
LOST_BECAUSE = {
    "stalled": "its worker stalled (the process stopped, or its event loop blocked) past the "
    "lease: the job may have been reclaimed and run again",
    "lease_expired": "its lease ran out on its worker's clock: the job may have been "
    "reclaimed and run again",
    "lease_refused": "the database refused its lease at a heartbeat: the job was reclaimed",
    "claimed_again": "the job was reclaimed and claimed again while this body ran",
}
LOST_OTHERWISE = "its lease was lost before its outcome was written: the job was reclaimed"


@dataclass(frozen=True)
class FlushResult:
    """What one flush wrote."""

    submitted: int
    written: int
    starts: int = 0


class Completer:
    """Buffers starts and successes and flushes them; ``close`` writes whatever is left."""

    # Plain field assignments, alike the constructors of HookPipe (batch_hook.py), ParentWatch
    # and LoopLagWatchdog by shape only: other data.
    def __init__(
        self,
        backend: Backend,
        worker_id: Any,
        log: Any,
        *,
        holdings: ActiveJobs,
        database: DatabaseOutage,
        clock: Clock,
        max_batch: int,
        on_flushed: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.log = log
        self.holdings = holdings
        self.database = database
        self.clock = clock
        self.max_batch = max_batch
        self.on_flushed = on_flushed
        self.backlog_limit = 4 * max_batch
        self._starts: deque[ActiveJob] = deque()
        self._successes: deque[tuple[ActiveJob, Success]] = deque()
        self._lost: deque[ActiveJob] = deque()  # bodies that ran under leases lost since
        self._waiting: set[UUID] = set()  # jobs whose success waits
        self._ready = asyncio.Event()
        self._closing = False
        self._backoff = Backoff()
        self._guard = UnexpectedErrorGuard("completer", log)
        self.hooks = HookPipe(backend, log, holdings)

    def submit_start(self, held: ActiveJob) -> None:
        """Queue the start mark of a job whose body just began."""
        self._starts.append(held)
        self._ready.set()

    def submit(self, held: ActiveJob, success: Success) -> None:
        """Queue one success (``success.ran_for`` dates a start not written yet)."""
        self._successes.append((held, success))
        self._waiting.add(held.job.id)
        self._ready.set()

    def submit_lost(self, held: ActiveJob) -> None:
        """Queue the attempt row of a body that ran under a lease this worker lost."""
        self._lost.append(held)
        self._ready.set()

    @property
    def backlog(self) -> int:
        """Successes not written yet."""
        return len(self._successes)

    async def run(self, stop: asyncio.Event) -> None:
        """Flush whatever waits until ``stop`` is set (the worker runs it as a sibling, so
        an unexpected failure that repeats stops the worker instead of silently leaving
        successes unwritten); ``close`` writes the rest."""
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set() and not self._closing:
                ready = asyncio.ensure_future(self._ready.wait())
                await asyncio.wait({ready, stopper}, return_when=asyncio.FIRST_COMPLETED)
                ready.cancel()
                self._ready.clear()
                while (self._successes or self._starts or self._lost) and not self._closing:
                    try:
                        await self._flush_until_written()
                        self._guard.succeeded()
                    except Exception as exc:
                        self._guard.failed(exc)
                        await asyncio.sleep(self._backoff.next())
                    if self.on_flushed is not None:
                        self.on_flushed()  # finished rows no longer count against caps
        finally:
            stopper.cancel()

    async def _flush_until_written(self, deadline: float | None = None) -> None:
        """One flush, retried with backoff while the database is away (until ``deadline``)."""
        while True:
            try:
                await self.flush_once()
            except TRANSIENT_ERRORS as exc:
                self.database.failed("completer", exc)
                if deadline is not None and self.clock.monotonic() >= deadline:
                    raise
                await retry_pause(self.database, self._backoff.next())
                continue
            self._backoff.reset()
            return

    async def flush_once(self) -> FlushResult:
        """Write the waiting starts and up to ``max_batch`` waiting successes.

        Nothing is taken off the queues until its write commits, so a transient failure loses
        nothing: the caller retries. Non-transient failures are isolated item by item.
        """
        count = min(self.max_batch, len(self._successes))
        batch = [self._successes[i] for i in range(count)]
        now = self.clock.monotonic()
        if self._lost:
            await self._write_lost(now)
        starts = [
            Start(held.job.id, held.lease.attempt, held.ran_for(now))
            for held in self._starts
            if held.lost is None and held.job.id not in self._waiting
        ]
        start_count = len(self._starts)
        if starts:
            await shielded(self.backend.mark_started_many(self.worker_id, starts))
        for _ in range(start_count):
            self._starts.popleft()
        if not batch:
            self.database.succeeded()
            return FlushResult(0, 0, len(starts))
        successes = [success for held, success in batch if held.lost is None]
        refused: list[tuple[Outcome, Sequence[ActiveJob]]] = []
        try:
            written = await shielded(self.backend.mark_succeeded_many(self.worker_id, successes))
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            self.log.error("completion_flush_failed", error=repr(exc), size=len(batch))
            written = await self._one_by_one(batch, refused)
        self.database.succeeded()
        hooked = [*self._batch_outcomes(batch, written), *refused]
        self.hooks.submit(hooked)  # they stay held until applied
        kept = {held for _, jobs in hooked for held in jobs}  # ActiveJob: by identity
        for _ in range(count):
            held, success = self._successes.popleft()
            self._waiting.discard(held.job.id)
            if success.job_id not in written:
                self._lost.append(held)  # the body ran: its row goes with the next flush
                self.log.warning(
                    "completion_dropped",
                    job_id=str(success.job_id),
                    attempt=success.attempt,
                    reason=held.lost or "lease_lost",
                    note="the job's lease was lost before its success was written: the "
                    "reclaimed attempt wins",
                )
            if not kept or held not in kept:
                self.holdings.remove(held)
        return FlushResult(count, len(written), len(starts))

    async def _write_lost(self, now: float) -> None:
        """The attempt rows of bodies that ran under lost leases (taken off the queue once
        written)."""
        count = len(self._lost)
        lost = [
            LostAttempt(
                held.job.id,
                held.lease.attempt,
                started_ago=max(0.0, now - held.started_monotonic),
                ended_ago=0.0
                if held.ended_monotonic is None
                else max(0.0, now - held.ended_monotonic),
                reason=LOST_BECAUSE.get(held.lost or "", LOST_OTHERWISE),
            )
            for held in list(self._lost)[:count]
        ]
        await shielded(self.backend.record_lost_attempts(self.worker_id, lost))
        for _ in range(count):
            self._lost.popleft()

    @staticmethod
    def _batch_outcomes(
        batch: list[tuple[ActiveJob, Success]], written: set[UUID]
    ) -> list[tuple[Outcome, Sequence[ActiveJob]]]:
        """The written successes of batch children and workflow steps."""
        return succeeded_children([held for held, success in batch if success.job_id in written])

    async def _one_by_one(
        self,
        batch: list[tuple[ActiveJob, Success]],
        refused: list[tuple[Outcome, Sequence[ActiveJob]]],
    ) -> set[UUID]:
        """Isolate a poisonous item: write each success on its own; one the database refuses
        fails its job instead of leaving it running (a batch child's failure goes to
        ``refused`` for the hook)."""
        written: set[UUID] = set()
        for held, success in batch:
            if held.lost is not None:
                continue
            try:
                if await self.backend.mark_succeeded_many(self.worker_id, [success]):
                    written.add(success.job_id)
            except TRANSIENT_ERRORS:
                raise
            except Exception as exc:
                error = ErrorInfo(
                    "UnstorableResult", f"the database refused the job's result: {exc}"
                )
                self.log.error(
                    "completion_refused", job_id=str(success.job_id), error=error.message
                )
                ran_for = success.ran_for
                row = await self.backend.mark_failed_or_retry(
                    held.lease, error, None, ran_for=ran_for
                )
                outcome = outcome_of(held.job, status_of_row(row))
                if outcome is not None:
                    refused.append((outcome, [held]))
        return written

    async def close(self, *, within: float | None = None) -> None:
        """Stop the flusher and write everything still waiting, retrying while the database
        is away for at most ``within`` seconds (None: until written)."""
        self._closing = True
        self._ready.set()
        deadline = None if within is None else self.clock.monotonic() + within
        try:
            while self._successes or self._starts or self._lost:
                await self._flush_until_written(deadline)
        except TRANSIENT_ERRORS as exc:
            # Alike report_result.py's failed commit by shape only: a transient error logged
            # with what becomes of the jobs.
            self.log.error(
                "completions_unwritten",
                count=len(self._successes),
                error=str(exc),
                note="those jobs stay running; the leader reclaims them when their leases "
                "expire and they run again",
            )
        await self.hooks.close()
