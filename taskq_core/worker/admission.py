"""Admission: whether a claimed job's body may start, and the start mark once it does.

Limits first: the actor's rate limits and reservations (denied: back to ``scheduled`` at the
limiter's retry_after, the attempt uncounted, the body never started; a keyed limit whose
key function raises fails the job); the reservation slots go back once the body ends. Then
``clear_to_start``: one body per job per worker (an earlier body of the job still running
here is waited for up to the two cancel graces, then the claim is handed back unstarted)
and a lease the worker can vouch for (before its deadline on the worker's clock), else the
holding is dropped unrun. ``check_lease_at_start`` makes that check once more right before
the actor's function is called, in its thread for a plain ``def``; only then does the start
mark go to the completer (``mark_start``), so a body refused at its start leaves none. A job
the reclaim sweep gave back unstarted before has its start written first, awaited
(``record_start``), so a body that kills its worker at once still counts as a crash.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Denied, ErrorInfo, Start
from taskq_core.ratelimit.gate import STORE_UNAVAILABLE_RETRY_AFTER, Denial
from taskq_core.ratelimit.registry import KeyFunctionError
from taskq_core.worker.active import ActiveJob
from taskq_core.worker.batch_hook import status_of_reschedule, status_of_row
from taskq_core.worker.cancel import lose
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.report_error import settle
from taskq_core.worker.transient import TRANSIENT_ERRORS, Backoff, retry_pause, shielded


async def admit(deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any) -> str | None:
    """Admit the job under its actor's limits: None when admitted, else the outcome written
    (``rate_limited``: back to scheduled at the limiter's retry_after, its attempt given back
    and the limit named in the event; ``failed``: a keyed limit cannot name its key, or a
    weighted one price the job).

    The limiter store's database trouble is retried with backoff like an outcome write, until
    the lease is lost; any other limiter failure holds the job back for a while, logged.
    """
    limiter, job, lease = deps.limiter, held.job, held.lease
    assert limiter is not None
    backoff = Backoff()
    while True:
        try:
            verdict = await limiter.admit(ref.name, payload, job.id, deps.worker_id, job.queue)
            break
        except KeyFunctionError as exc:
            return await _fail_unkeyed(deps, held, exc)
        except TRANSIENT_ERRORS as exc:
            deps.database.failed("consumer", exc)
            if held.lost is not None:
                deps.active.remove(held)
                return "lost"
            await retry_pause(deps.database, backoff.next())
        except Exception as exc:  # a limiter fault must not run the job unlimited, nor hang it
            deps.log.error(
                "job_admission_failed", job_id=str(job.id), error=f"{type(exc).__name__}: {exc}"
            )
            verdict = Denial("limit_store_unavailable", "error", STORE_UNAVAILABLE_RETRY_AFTER)
            break
    if not isinstance(verdict, Denial):
        return None
    deps.active.settle(held)
    # Gathered with the worker's other denials: a limit's backlog is denied by the thousand.
    denied = Denied(job.id, lease.attempt, verdict.retry_after, verdict.reason)
    state = await settle(deps, held, lambda: deps.denials.ask(denied), status_of_reschedule)
    deps.state.stats.rate_limited += 1
    deps.log.debug(
        "job_rate_limited",
        job_id=str(job.id),
        limit=verdict.limit,
        kind=verdict.kind,
        retry_after=verdict.retry_after.total_seconds(),
        state=state,
    )
    return "rate_limited"


async def _fail_unkeyed(deps: WorkerDeps, held: ActiveJob, exc: KeyFunctionError) -> str:
    """A keyed limit cannot name this job's key (or a weighted one price it): it fails for
    good, saying why."""
    error = ErrorInfo(exc.error_class, str(exc))
    deps.active.settle(held)
    await settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(held.lease, error, None),
        status_of_row,
    )
    deps.log.warning(
        "job_limit_key_failed",
        job_id=str(held.job.id),
        error_class=exc.error_class,
        error=error.message,
    )
    deps.state.stats.failed += 1
    return "failed"


async def release_slots(deps: WorkerDeps, held: ActiveJob, *, abandoned: bool) -> None:
    """Give back the job's reservation slots once its body ended. A body written off as
    abandoned may still run: its slots are no longer renewed, and the leaked-slot sweep
    frees them once their lease runs out. A release that fails is left to the same lease."""
    limiter = deps.limiter
    assert limiter is not None
    if abandoned:
        limiter.forget([held.job.id])
        return
    try:
        await shielded(limiter.release(held.job.id, deps.worker_id))
    except Exception as exc:
        limiter.forget([held.job.id])
        deps.log.warning(
            "reservation_release_failed",
            job_id=str(held.job.id),
            error=f"{type(exc).__name__}: {exc}",
            note="the slots are freed once their lease runs out",
        )


async def clear_to_start(deps: WorkerDeps, held: ActiveJob) -> bool:
    """Whether ``held``'s body may start now; otherwise the holding is dropped and written
    nothing for (False).

    One body per job per worker: an earlier body of the job that still runs here (its
    holding was lost or superseded, say after a stall; an async body unwinding its cancel, a
    thread that cannot be stopped) is waited for, for up to the two cancel graces; past
    them the job is handed back unstarted, to run once that body is over or elsewhere. And a
    body starts only on a lease the worker can vouch for: past its deadline (the last
    confirmed renewal + the lease - one heartbeat) the leader may have reclaimed the job and
    another worker may run it.
    """
    earlier = deps.active.body_of(held.job.id)
    if earlier is not None and earlier is not held:
        settings = deps.settings
        patience = settings.cancellation_grace_period + settings.cleanup_grace_period
        ended = deps.active.body_end(earlier)
        await asyncio.wait({ended}, timeout=patience)  # never cancels it
        if not ended.done() and held.lost is None:
            await _hand_back_unstarted(deps, held)
            return False
    if held.lost is None and deps.active.expired(held, deps.clock.monotonic()):
        lose(deps, held, "lease_expired")
    if held.lost is not None:
        deps.active.remove(held)
        return False
    return True


# Its warning is alike report_start_without_body's below by shape only: each names its own
# event and says what becomes of the job.
async def _hand_back_unstarted(deps: WorkerDeps, held: ActiveJob) -> None:
    """Give a job back unstarted (fenced) while an earlier body of it still runs here."""
    deps.log.warning(
        "job_earlier_body_running",
        job_id=str(held.job.id),
        attempt=held.lease.attempt,
        note="an earlier body of this job still runs in this worker: the claim is handed "
        "back unstarted instead of running a second body beside it",
    )
    deps.active.remove(held)
    try:
        await shielded(
            deps.backend.release_leases(deps.worker_id, [held.lease], reason="earlier_body_running")
        )
    except TRANSIENT_ERRORS as exc:  # its lease expires and the leader reclaims it
        deps.database.failed("consumer", exc)


async def record_start(deps: WorkerDeps, held: ActiveJob) -> bool:
    """Write the start of a job reclaimed unstarted before, awaited before its body runs.

    Such a job may be one whose body takes its worker down at once, before the completer's
    batched start mark goes out: with its start on the row, the next reclaim counts that as a
    crash and the poison rule can stop it. Retried with backoff while the database is away;
    False when the lease is not this worker's any more (the body must not run then).
    """
    lease = held.lease
    backoff = Backoff()
    while held.lost is None:
        start = Start(lease.job_id, lease.attempt, held.ran_for(deps.clock.monotonic()))
        write = asyncio.ensure_future(deps.backend.mark_started_many(deps.worker_id, [start]))
        try:
            written = await shielded(write)
        except asyncio.CancelledError:
            # The consumer is cancelled (the worker stops) while the start is written: the
            # body will not run, but the shielded write goes on and may land.
            write.add_done_callback(lambda done: _landed_without_body(deps, held, done))
            raise
        except TRANSIENT_ERRORS as exc:
            deps.database.failed("consumer", exc)
            await retry_pause(deps.database, backoff.next())
            continue
        deps.database.succeeded()
        if lease.job_id in written:
            held.start_written = True
            return True
        deps.log.warning(
            "job_start_fenced",
            job_id=str(lease.job_id),
            attempt=lease.attempt,
            note="the lease was lost before the body started: it does not run here",
        )
        return False
    return False


def _landed_without_body(deps: WorkerDeps, held: ActiveJob, write: asyncio.Future[Any]) -> None:
    if not write.cancelled() and write.exception() is None and held.job.id in write.result():
        report_start_without_body(deps, held)


def report_start_without_body(deps: WorkerDeps, held: ActiveJob) -> None:
    """The start written before the body (``record_start``) stays on the row, but the body
    was not called (its lease ran out first, say while the process was stopped, or its
    consumer was cancelled): the reclaim counts the attempt as crashed though no body ran.
    Said once, so the history can be read."""
    deps.log.warning(
        "job_start_without_body",
        job_id=str(held.job.id),
        attempt=held.lease.attempt,
        note="its start was written before the body, which was then not called: the attempt "
        "is reclaimed as crashed, though its body never ran",
    )


class LeaseGoneAtStart(Exception):
    """The body was about to be called on a lease that may have run out."""


def check_lease_at_start(deps: WorkerDeps, held: ActiveJob) -> None:
    """The last check before the actor's function is called (its DI resolved, its thread
    free): the lease is still this worker's to vouch for. A thread may take its work up long
    after it was queued, a stopped process resumes its threads with the loop, and providers
    may await: so the check is made again right here, in the thread that runs the body. A
    start written just before the body (``record_start``) is no exception: the process may
    stop between that write and this line, and the lease run out meanwhile.

    The start is dated before the check: a process stopped between the two is caught by the
    check; one stopped after it resumes a body that was let start before its lease ran out,
    and the date says so (read after the check, it would carry the stop)."""
    let_start_at = time.time()
    if held.lost is not None or deps.active.expired(held, deps.clock.monotonic()):
        raise LeaseGoneAtStart
    held.body_ran = True
    if held.ctx is not None:
        held.ctx._let_start_at = let_start_at


def mark_start(deps: WorkerDeps, held: ActiveJob) -> None:
    """The body was called: its start mark goes to the completer (batched), unless it was
    written before the body."""
    if not held.start_written:
        deps.completer.submit_start(held)
