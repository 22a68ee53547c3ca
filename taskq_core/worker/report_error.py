"""Report-error: every outcome of a job other than a success, written fenced by its lease.

A failure is retried with backoff or failed for good (an invalid payload, a result the queue
cannot store, an exhausted budget); a cancelled body ends ``cancelled``, or ``interrupted``
when a graceful shutdown stopped it; an actor this worker does not know is snoozed (an
actor's own Snooze and RetryAfter are written inline by ``report_result.record``, which
saves those jobs an await). Each write goes through ``settle``: retried while
the database is away, dropped only once the lease is lost (the reclaimed attempt wins), and a
body that ran under a lost lease still gets its row in the attempt history.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import ErrorInfo
from taskq_core.errors import PayloadValidationError
from taskq_core.retry import RetryDelayError
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob, CancelPhase
from taskq_core.worker.batch_hook import (
    is_hooked,
    status_as_written,
    status_if_cancelled,
    status_of_reschedule,
    status_of_row,
)
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.transient import TRANSIENT_ERRORS, Backoff, retry_pause, shielded

UNKNOWN_ACTOR_SNOOZE = timedelta(seconds=10)
T = TypeVar("T")


def error_info(exc: BaseException) -> ErrorInfo:
    """The exception as the attempt history stores it."""
    return ErrorInfo(
        error_class=type(exc).__name__,
        message=str(exc) or type(exc).__name__,
        traceback="".join(traceback.format_exception(exc)),
    )


async def snooze_unknown_actor(deps: WorkerDeps, held: ActiveJob) -> str:
    """No actor of the job's name here: snoozed, for a worker that has it (or a deploy)."""
    job, lease = held.job, held.lease
    deps.log.error("dispatch_actor_not_found", job_id=str(job.id), actor=job.actor)
    deps.active.settle(held)
    await settle(
        deps,
        held,
        lambda: deps.backend.mark_snoozed(lease, UNKNOWN_ACTOR_SNOOZE),
        status_of_reschedule,
    )
    return "snoozed"


async def fail_invalid_payload(
    deps: WorkerDeps, held: ActiveJob, exc: PayloadValidationError
) -> str:
    """A payload the actor's model refuses fails the job for good: no retry can fix it."""
    error, lease = error_info(exc), held.lease
    deps.active.settle(held)
    await settle(
        deps, held, lambda: deps.backend.mark_failed_or_retry(lease, error, None), status_of_row
    )
    deps.state.stats.failed += 1
    return "failed"


async def record_unstorable(
    deps: WorkerDeps, held: ActiveJob, exc: Exception, ran_for: float
) -> str:
    """A return value the queue cannot store fails the job for good, saying why."""
    error = ErrorInfo("UnstorableResult", f"the actor's return value is {exc}")
    await settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(held.lease, error, None, ran_for=ran_for),
        status_of_row,
    )
    deps.log.warning("job_result_unstorable", job_id=str(held.job.id), error=error.message)
    deps.state.stats.failed += 1
    return "failed"


async def record_error(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, exc: BaseException, ran_for: float
) -> str:
    """The body raised: retried after the actor's backoff, or failed once its budget is spent."""
    job = held.job
    ceiling = deps.settings.max_retry_backoff
    try:
        delay = ref.retry.next_delay(job.attempts_used, max_retry_backoff=ceiling, error=exc)
    except RetryDelayError as problem:  # the application's function: its bug must not lose
        deps.log.warning(  # the job, nor hold it back for ever
            "retry_delay_failed",
            job_id=str(job.id),
            actor=job.actor,
            error=str(problem),
            note="the built-in backoff is used for this retry",
        )
        delay = ref.retry.next_delay(job.attempts_used, max_retry_backoff=ceiling)
    row = await settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(
            held.lease, error_info(exc), delay, ran_for=ran_for
        ),
        status_of_row,
    )
    deps.log.warning(
        "job_attempt_failed",
        job_id=str(job.id),
        actor=job.actor,
        attempt=job.attempt,
        error=f"{type(exc).__name__}: {exc}",
        retry_in=delay.total_seconds() if delay else None,
    )
    if row is not None and row.status.value == "failed":
        deps.state.stats.failed += 1
        return "failed"
    if row is not None and row.status.value == "cancelled":
        deps.state.stats.cancelled += 1
        return "cancelled"
    deps.state.stats.retried += 1
    return "retried"


async def record_cancel(deps: WorkerDeps, held: ActiveJob, ran_for: float) -> str:
    """A cancelled run: a shutdown's interruption goes back to the queue, its budget
    unspent (a requested cancel still wins there: the database ends it cancelled); a
    requested cancel ends ``cancelled`` unless the heartbeat already owns the (abandoned)
    terminal write."""
    if held.cancel_phase >= CancelPhase.ABANDON_PENDING:
        return "abandoned"
    lease = held.lease
    if held.cancel_reason == "shutdown":
        await settle(
            deps,
            held,
            lambda: deps.backend.mark_interrupted(lease, reason="shutdown", ran_for=ran_for),
            status_as_written,
        )
        return "interrupted"
    await settle(
        deps,
        held,
        lambda: deps.backend.mark_cancelled(lease, ran_for=ran_for),
        status_if_cancelled,
    )
    deps.state.stats.cancelled += 1
    return "cancelled"


def note_lost_body(deps: WorkerDeps, held: ActiveJob) -> None:
    """A body ran under a lease this worker lost: its row in the attempt history (a lease
    given up while the database was away is handed back by the heartbeat, which records
    the body itself)."""
    if held.body_ran and held.lost != "heartbeat_lost":
        deps.completer.submit_lost(held)


async def settle(
    deps: WorkerDeps,
    held: ActiveJob,
    write: Callable[[], Awaitable[T]],
    status: Callable[[T], JobStatus | None],
) -> T | None:
    """Run one fenced outcome write, retried with backoff while the database is away; give
    up (None) only once the lease is lost. The holding is released afterwards, or, when the
    write ended a batch child (``status`` reads the write's answer as the job's new status),
    by the batch hook once it applied the outcome."""
    backoff = Backoff()
    hooked = False
    try:
        while True:
            try:
                result = await shielded(write())
            except TRANSIENT_ERRORS as exc:
                deps.database.failed("consumer", exc)
                if held.lost is not None:
                    deps.log.warning("outcome_dropped", job_id=str(held.job.id), reason=held.lost)
                    note_lost_body(deps, held)
                    return None
                await retry_pause(deps.database, backoff.next())
                continue
            deps.database.succeeded()
            if is_hooked(held.job.metadata):  # two lookups for a job outside a batch or workflow
                ended = status(result)
                applied = deps.completer.hooks.submit_write(held, ended)
                hooked = applied is not None
                if applied is not None and ended is JobStatus.FAILED:
                    # It may abort the batch or cancel steps: this consumer starts nothing
                    # before.
                    await shielded(applied)
            return result
    finally:
        if not hooked:
            deps.active.remove(held)
