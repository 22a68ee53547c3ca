"""Settling an attempt: every outcome of a claimed job, through one path.

A worker's write (success, failure, retry, snooze, retry-after, cancel, a shutdown's
interrupt, abandon), a release and the reclaim sweep all describe what happened as an
``Ending``; ``decide`` turns it into a ``Settlement`` by the shared rules (a requested cancel
wins over any rescheduling, then the job's deadline, then its attempt budget; a job given
back retries while ``retries_left``), and ``write_settlement`` writes it: at most one attempt
row, one event, the row's fields. An attempt number is never given back: an attempt that
spends no budget is counted in ``uncounted_attempts``. Every worker write is fenced by its
lease (``MemoryStore._leased``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

# Names postgres/settle.py imports too, on purpose: both implement protocol.worker.
from taskq_core.backend.protocol import (
    Denied,
    ErrorInfo,
    JobRow,
    Lease,
    RetryAfterOutcome,
    SnoozeOutcome,
    Success,
    derived,
    first_success_per_job,
)
from taskq_core.backend.protocol.poison import BLAMED_AHEAD, poison_error, worker_crashes
from taskq_core.constants import DENIAL_GRID, UNSTARTED_RECLAIM_LIMIT
from taskq_core.retry import retries_left
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

from .jsonb import json_text
from .store import PENDING, RUNNING, SCHEDULED, JobRecord, MemoryStore

AttemptOutcome = Literal[
    "succeeded",
    "failed",
    "retried",
    "snoozed",
    "retry_after",
    "cancelled",
    "interrupted",
    "abandoned",
    "crashed",
]
_ENDS: dict[str, JobStatus] = {
    "succeeded": JobStatus.SUCCEEDED,
    "failed": JobStatus.FAILED,
    "cancelled": JobStatus.CANCELLED,
    "abandoned": JobStatus.ABANDONED,
}
# What the rescheduling outcomes call themselves in a DeadlineExceeded message.
_WHAT = {"retried": "retry", "snoozed": "snooze", "retry_after": "retry-after"}
_LOCK_EXPIRED = ErrorInfo("WorkerCrashed", "the worker's lock expired without a terminal write")


@dataclass(frozen=True, slots=True)
class Ending:
    """What is asked for one attempt, by its worker or by whoever takes the job from it.

    ``run_at`` set: a rescheduling outcome (retried, snoozed, retry_after), or for
    ``crashed`` where a job with retries left waits (``retry_as``). ``counts`` False spends
    no budget (snooze, a retry-after that spends none). ``started`` is False
    for a ``crashed`` job whose body never ran. ``ran_for`` dates a start not recorded yet.
    ``poison``: the reclaim found a poison job (its worker died running it too often); a
    started job then fails with this error unless a cancel was asked.
    """

    outcome: AttemptOutcome
    error: ErrorInfo | None = None
    run_at: datetime | None = None
    counts: bool = True
    started: bool = True
    retry_as: JobStatus = SCHEDULED
    ran_for: float | None = None
    poison: ErrorInfo | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    """An attempt's end, decided: the one write ``write_settlement`` makes.

    ``attempt_outcome`` None writes no attempt row; ``counts`` False adds the attempt to the
    uncounted ones. ``job_error`` None leaves the row's last error. ``run_at``
    None keeps scheduled_at. ``given_back``: the worker no longer holds the job (release,
    reclaim), so its lock is cleared even when the job ends.
    """

    status: JobStatus
    attempt_outcome: str | None
    attempt_error: ErrorInfo | None = None
    job_error: ErrorInfo | None = None
    run_at: datetime | None = None
    counts: bool = True
    given_back: bool = False


def decide(job: JobRecord, ending: Ending, now: datetime) -> Settlement:
    """Where the attempt ends, by the rules every outcome shares."""
    outcome, error = ending.outcome, ending.error
    if outcome == "crashed":
        return _given_back(job, ending, now)
    if outcome == "abandoned":
        return _abandoned(job, ending, now)
    if outcome == "interrupted":  # a shutdown stopped the body: back in its place, uncounted
        if job.cancel_requested_at is not None:
            return Settlement(JobStatus.CANCELLED, "cancelled")
        return Settlement(PENDING, "interrupted", counts=False, given_back=True)
    if ending.run_at is None:  # an end the worker reports
        return Settlement(_ENDS[outcome], outcome, error, error)
    # Rescheduling: a requested cancel wins, then the deadline, then the attempt budget.
    if job.cancel_requested_at is not None:
        return Settlement(JobStatus.CANCELLED, "failed" if error else "cancelled", error, error)
    if job.schedule_to_close is not None and ending.run_at > job.schedule_to_close:
        message = f"{_WHAT[outcome]} would start after schedule_to_close"
        if error is not None:  # the attempt keeps the actor's error; the job says why it stopped
            message += f" (last error: {error.message})"
        stop = ErrorInfo("DeadlineExceeded", message, error.traceback if error else None)
        return Settlement(JobStatus.FAILED, "failed", error or stop, stop)
    if (
        outcome == "retry_after"
        and ending.counts
        and job.retry_kind == "transient"
        and job.attempts_used >= job.max_attempts
    ):
        message = f"all {job.max_attempts} attempts used; retry-after refused"
        stop = ErrorInfo("MaxAttemptsExceeded", message)
        return Settlement(JobStatus.FAILED, "failed", stop, stop)
    return Settlement(SCHEDULED, outcome, error, error, ending.run_at, ending.counts)


def _abandoned(job: JobRecord, ending: Ending, now: datetime) -> Settlement:
    """A body that ignored its forced cancel: an operator's cancel (or no retries left) ends
    the job abandoned; a shutdown's gives it back like a crash, due now."""
    error = ending.error
    if job.cancel_requested_at is not None or not retries_left(
        job.retry_kind, job.attempts_used, job.max_attempts, job.schedule_to_close, now
    ):
        return Settlement(JobStatus.ABANDONED, "abandoned", error, error)
    return Settlement(PENDING, "abandoned", error, error, now, given_back=True)


def _given_back(job: JobRecord, ending: Ending, now: datetime) -> Settlement:
    """A job its worker no longer runs: a started one gets a crashed attempt (the row keeps
    the error without its traceback), a never-started one its attempt back; then a requested
    cancel -> cancelled, never started -> pending in its place, a poison job -> failed with
    the poison error, retries left -> ``retry_as`` at ``run_at``, else crashed."""
    error = ending.error or _LOCK_EXPIRED
    if ending.started:
        row, job_error = "crashed", ErrorInfo(error.error_class, error.message)
    else:
        row, job_error = None, None
    status, run_at = JobStatus.CRASHED, None
    if job.cancel_requested_at is not None:
        status = JobStatus.CANCELLED
    elif not ending.started:
        status = PENDING
    elif ending.poison is not None:
        status, job_error = JobStatus.FAILED, ending.poison
    elif retries_left(
        job.retry_kind, job.attempts_used, job.max_attempts, job.schedule_to_close, now
    ):
        status, run_at = ending.retry_as, ending.run_at
    return Settlement(
        status, row, error if row else None, job_error, run_at, ending.started, given_back=True
    )


def on_denial_grid(due: datetime, deadline: datetime | None) -> datetime:
    """A denied job's due time rounded up to the next multiple of DENIAL_GRID (as the
    settle statements do), never past its deadline."""
    grid = DENIAL_GRID.total_seconds()
    rounded = datetime.fromtimestamp(math.ceil(due.timestamp() / grid) * grid, tz=due.tzinfo)
    return rounded if deadline is None else min(rounded, deadline)


# The settle path as functions of the store: the leader's reclaim and the operator's end of
# a running job write through them too, without being settle parts themselves.
def plan_ending(store: MemoryStore, job: JobRecord, ending: Ending) -> Settlement:
    """Date a start the worker had not recorded yet, then decide ``ending``."""
    if ending.ran_for is not None and job.started_at is None:
        job.started_at = store._now() - timedelta(seconds=ending.ran_for)
    return decide(job, ending, store._now())


def write_settlement(
    store: MemoryStore,
    job: JobRecord,
    worker_id: UUID | None,
    plan: Settlement,
    *,
    kind: str = "state_change",
    detail: dict[str, Any] | None = None,
    announce: bool = True,
) -> Settlement:
    """Write a decided settlement: the attempt row, the event and the row, once each; a job
    it schedules is announced to the promotion unless ``announce`` is false (as settle.sql:
    not a rate limit's denial)."""
    # A give-back of a body its worker already recorded as lost adds no second row.
    if plan.attempt_outcome is not None and not (
        plan.attempt_outcome == "crashed" and store._has_attempt(job.id, job.attempt)
    ):
        store._record_attempt(job, plan.attempt_outcome, worker_id, plan.attempt_error)
    if kind == "reclaim" and not plan.counts:
        # A reclaim of a body that never started: its next claim carries the count.
        job.unstarted_reclaims += 1
    if not plan.counts:
        job.uncounted_attempts += 1  # the number stays: the next body's is higher
    store._transition(job, plan.status, worker_id=worker_id, kind=kind, detail=detail)
    if plan.job_error is not None:
        job.set_error(plan.job_error)
    if plan.run_at is not None:
        job.scheduled_at = plan.run_at
    if plan.status is SCHEDULED and announce:
        store._announce_scheduled([job])  # a retry's backoff, a snooze: promoted when due
    if plan.status in TERMINAL_STATUSES and not plan.given_back:
        job.lock_expires_at = None  # the worker's own end: who ran it last stays
    else:
        job.clear_lock()
        if plan.status is not JobStatus.CANCELLED:
            job.cancel_phase = 0  # a forced cancel's phase ends with the attempt it forced
    return plan


def settle_ending(
    store: MemoryStore,
    job: JobRecord,
    worker_id: UUID | None,
    ending: Ending,
    *,
    detail: dict[str, Any] | None = None,
) -> Settlement:
    """Decide ``ending`` and write it (a state_change event)."""
    return write_settlement(store, job, worker_id, plan_ending(store, job, ending), detail=detail)


def counts_as_started(job: JobRecord) -> bool:
    """Whether a reclaim of ``job`` uses its attempt: its body started, or it was already
    reclaimed unstarted UNSTARTED_RECLAIM_LIMIT times (a job that kills its worker before
    its start is written must not loop forever)."""
    return job.started_at is not None or job.unstarted_reclaims >= UNSTARTED_RECLAIM_LIMIT


def is_blamed(store: MemoryStore, job: JobRecord) -> bool:
    """Whether its worker's death is blamed on ``job``: its start is recorded and no other
    running body of that worker started after it (ties by id; ``backend.protocol.poison``)."""
    if job.started_at is None:
        return False
    mine = (job.started_at, job.id.bytes)
    return not any(
        other.status is RUNNING
        and other.locked_by_worker == job.locked_by_worker
        and other.id != job.id
        and other.started_at is not None
        and (other.started_at, other.id.bytes) > mine
        for other in store._jobs.values()
    )


def reclaim(
    store: MemoryStore, job: JobRecord, now: datetime, poison_reclaims: int | None, *, blamed: bool
) -> None:
    """One expired lease (the reclaim): a 'reclaim' event; never started counts as started
    after UNSTARTED_RECLAIM_LIMIT such reclaims (``start_assumed``); the
    ``poison_reclaims``-th crash blamed on the job in a row fails it as a poison job (the
    rule: ``backend.protocol.poison``); a retry goes back to pending at now."""
    worker_id = job.locked_by_worker
    started = counts_as_started(job)
    assumed = started and job.started_at is None  # by UNSTARTED_RECLAIM_LIMIT
    # Its start was written before the body was called (a job reclaimed unstarted before).
    before_body = job.started_at is not None and job.unstarted_reclaims > 0
    poison, crashes = None, 0
    if blamed and poison_reclaims:
        crashes = len(worker_crashes(e for e in store._events if e.job_id == job.id)) + 1
        if crashes >= poison_reclaims:
            poison = poison_error(crashes, poison_reclaims)
    # Blamed: back a microsecond ahead of the other bodies its worker died with (protocol.poison).
    due = now - BLAMED_AHEAD if blamed else now
    ending = Ending("crashed", _LOCK_EXPIRED, due, started=started, retry_as=PENDING, poison=poison)
    plan = plan_ending(store, job, ending)
    detail: dict[str, Any] = {
        "from_state": RUNNING.value,
        "to_state": plan.status.value,
        "reason": "lock_expired",
        "worker_id": None if worker_id is None else str(worker_id),
        "started": started,
    }
    if assumed:
        detail["start_assumed"] = True
    if started:
        detail["blamed"] = blamed
    if before_body:
        detail["start_before_body"] = True
    if plan.status is JobStatus.FAILED:
        detail.update(poison=True, crashes=crashes)
    write_settlement(store, job, worker_id, plan, kind="reclaim", detail=detail)


# Mirrors postgres/settle.py on purpose: both implement protocol.worker, so each method restates its
# signature (mypy checks the match).
class SettlePart(MemoryStore):
    """Every write that ends or reschedules a claimed attempt, plus the cancel escalation."""

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
        error = derived.release_error(reason, error)
        run_at = self._now() + retry_delay
        released = woken = 0
        for lease in {lease.job_id: lease for lease in leases}.values():
            job = self._leased(replace(lease, worker_id=worker_id))
            if job is None:
                continue
            started = job.started_at is not None or job.id in ran
            released += 1
            ending = Ending(
                "crashed", error, run_at, started=started, ran_for=0.0 if started else None
            )
            detail = {"reason": reason, "started": started}
            woken += settle_ending(self, job, worker_id, ending, detail=detail).status is PENDING
        if woken:
            self._wake()
        return released

    def _succeed(self, worker_id: UUID, success: Success, result: Any) -> bool:
        job = self._leased(Lease(success.job_id, worker_id, success.attempt))
        if job is None:
            return False
        config = self._actor_configs.get(job.actor)
        ttl = config.result_ttl if config is not None else None
        ttl = ttl if ttl is not None else job.result_ttl
        ttl = ttl if ttl is not None else success.fallback_result_ttl
        settle_ending(self, job, worker_id, Ending("succeeded", ran_for=success.ran_for))
        job.result = result
        job.result_expires_at = None if ttl is None else job.updated_at + ttl
        return True

    mark_succeeded = derived.mark_succeeded

    async def mark_succeeded_many(self, worker_id: UUID, successes: Sequence[Success]) -> set[UUID]:
        # Every result is read first, so one that cannot be stored writes nothing (as PG's one
        # statement).
        successes = first_success_per_job(successes)
        results = [json_text(s.result_json) for s in successes]
        written = {
            s.job_id
            for s, result in zip(successes, results, strict=True)
            if self._succeed(worker_id, s, result)
        }
        # An ephemeral success leaves no row: settled as any, then deleted with its history.
        self._drop([s.job_id for s in successes if s.ephemeral and s.job_id in written])
        return written

    async def mark_succeeded_with_conn(
        self,
        connection: Any,
        lease: Lease,
        result_json: str | None,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        # Applied when the handle commits; until then the job is held as Postgres holds its
        # locked row.
        handle = self._transaction_handle(connection)
        result = json_text(result_json)
        if self._leased(lease) is None or lease.job_id in handle.settling:
            return False  # not this lease's row, or this transaction settled it already
        success = Success(lease.job_id, lease.attempt, result_json, fallback_result_ttl, ran_for)
        handle.settling.add(lease.job_id)
        handle.on_commit.append(lambda: self._succeed(lease.worker_id, success, result))
        return True

    async def mark_failed_or_retry(
        self,
        lease: Lease,
        error: ErrorInfo,
        retry_delay: timedelta | None,
        *,
        ran_for: float | None = None,
    ) -> JobRow | None:
        job = self._leased(lease)
        if job is None:
            return None
        if retry_delay is None:
            ending = Ending("failed", error, ran_for=ran_for)
        else:
            ending = Ending("retried", error, self._now() + retry_delay, ran_for=ran_for)
        settle_ending(self, job, lease.worker_id, ending)
        return job.snapshot()

    async def mark_cancelled(self, lease: Lease, *, ran_for: float | None = None) -> bool:
        job = self._leased(lease)
        if job is None:
            return False
        settle_ending(self, job, lease.worker_id, Ending("cancelled", ran_for=ran_for))
        return True

    async def mark_interrupted(
        self, lease: Lease, *, reason: str = "shutdown", ran_for: float | None = None
    ) -> JobStatus | None:
        job = self._leased(lease)
        if job is None:
            return None
        ending = Ending("interrupted", ran_for=0.0 if ran_for is None else ran_for)
        status = settle_ending(self, job, lease.worker_id, ending, detail={"reason": reason}).status
        if status is PENDING:
            self._wake()
        return status

    async def mark_abandoned(self, lease: Lease, reason: str) -> JobStatus | None:
        job = self._leased(lease)
        if job is None or job.cancel_phase != 2:
            return None
        ending = Ending("abandoned", ErrorInfo("Abandoned", reason), ran_for=0.0)
        status = settle_ending(self, job, lease.worker_id, ending, detail={"reason": reason}).status
        if status is PENDING:
            self._wake()
        return status

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        job = self._leased(lease)
        if job is None:
            return "noop"
        ending = Ending("snoozed", None, self._now() + delay, counts=False, ran_for=ran_for)
        status = settle_ending(self, job, lease.worker_id, ending).status
        if status is SCHEDULED:
            job.metadata["snooze_count"] = int(job.metadata.get("snooze_count", 0)) + 1
            return "scheduled"
        return "cancelled" if status is JobStatus.CANCELLED else "failed"

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
        reason: str | None = None,
    ) -> RetryAfterOutcome:
        job = self._leased(lease)
        if job is None:
            return "noop"
        run_at = self._now() + delay
        never_ran = ran_for is None and job.started_at is None
        ending = Ending("retry_after", None, run_at, counts=consume_budget, ran_for=ran_for)
        plan = plan_ending(self, job, ending)
        if never_ran:
            plan = replace(plan, attempt_outcome=None)
        detail = None if reason is None else {"reason": reason}
        if reason is not None and plan.run_at is not None:  # a denial: on the grid
            plan = replace(plan, run_at=on_denial_grid(plan.run_at, job.schedule_to_close))
        write_settlement(self, job, lease.worker_id, plan, detail=detail, announce=reason is None)
        if plan.status is SCHEDULED:
            return "scheduled"
        if plan.status is JobStatus.CANCELLED:
            return "cancelled"
        if plan.job_error is not None and plan.job_error.error_class == "MaxAttemptsExceeded":
            return "failed:MaxAttemptsExceeded"
        return "failed:DeadlineExceeded"

    async def mark_denied_many(
        self, worker_id: UUID, denials: Sequence[Denied]
    ) -> dict[UUID, RetryAfterOutcome]:
        outcomes: dict[UUID, RetryAfterOutcome] = {}
        for denied in denials:
            lease = Lease(denied.job_id, worker_id, denied.attempt)
            outcomes[denied.job_id] = await self.mark_retry_after(
                lease, denied.delay, consume_budget=False, reason=denied.reason
            )
        return outcomes

    async def write_cancel_escalation(self, lease: Lease, *, reason: str = "requested") -> bool:
        job = self._leased(lease)
        if job is None or job.cancel_phase >= 2:
            return False
        detail = {"cancel_phase_from": job.cancel_phase, "cancel_phase_to": 2, "reason": reason}
        job.cancel_phase = 2
        job.updated_at = self._now()
        self._record_event(job, "state_change", RUNNING, RUNNING, lease.worker_id, detail)
        return True
