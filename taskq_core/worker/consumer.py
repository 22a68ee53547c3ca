"""ConsumerLoop: takes claimed jobs from the local queue and runs them to a recorded outcome.

Per job: skip it if its lease was lost while it waited; look up the actor, validate the
payload (invalid = failed, never retried), admit it under the actor's rate limits and
reservations (denied: back to ``scheduled`` at the limiter's retry_after, the attempt
uncounted, body never started; a keyed limit's key function that raises fails it); make sure
the body may start (``_clear_to_start``: no earlier body of the job still runs in this worker,
and the lease is surely live on the worker's clock, else the holding is dropped unrun; checked
once more right before the actor's function is called, in its thread for a plain ``def``),
start the holding (its start mark goes to the completer, batched, once the function is
called, so a body refused at its start leaves none; a job the reclaim sweep gave back
unstarted before has it written here, awaited, before its body runs, so a body that kills
its worker at once still counts as a crash), build the JobContext, resolve DI, run the actor in its
own task (so a forced cancel can target it), give its reservation slots back as soon as the
body ends, then write exactly one outcome, fenced by the job's lease:

- a return value is encoded to JSON once, here; one that cannot be stored (not JSON, or
  over TASKQ_MAX_RESULT_BYTES) fails the job (UnstorableResult, not retried) instead of
  leaving it running, so no oversized result reaches the completer or a settle;
- a success goes to the completer (batched); when the actor used ``ctx.connection()``, the
  success is written in that transaction and commits with the actor's own writes;
- any other outcome is written here, retried with backoff while the database is away, and
  dropped only if the lease is lost meanwhile (the reclaimed attempt wins);
- a body a graceful shutdown stopped is written ``interrupted`` (back to the queue, its
  budget unspent);
- a body that ran but whose outcome could not be written because the lease was lost still
  gets its row in the attempt history (``Completer.submit_lost``).


A batch child's terminal write goes to the batch hook (``batch_hook.HookPipe``), which
releases the job once it applied the outcome: the until-idle drain never sees the last child
gone and its finalizer not yet enqueued.

Writes are shielded: a cancellation of the consumer during shutdown cannot interrupt one.

While a job runs, its fields (job id, actor, queue, attempt, trace id) are bound to the log
context (``obs.logs.bind_job_context``), copied into a plain ``def`` actor's thread, and
unbound when it is over. Its progress reports go through ``progress.JobProgress``, whose last
report is written before the outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import traceback
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from taskq_core import jsontext
from taskq_core.actors import ActorRef, JobContext
from taskq_core.backend.protocol import ErrorInfo, Start, Success
from taskq_core.backend.protocol.batches import BATCH_ID_KEY
from taskq_core.backend.protocol.sizes import check_result_size
from taskq_core.di import actor_scope
from taskq_core.errors import PayloadValidationError
from taskq_core.obs.logs import bind_job_context, recording_trace_id, unbind_job_context
from taskq_core.obs.metrics import record_job
from taskq_core.obs.spans import consumer_span
from taskq_core.ratelimit.gate import STORE_UNAVAILABLE_RETRY_AFTER, Denial
from taskq_core.ratelimit.registry import KeyFunctionError
from taskq_core.retry import RetryAfter, Snooze
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob, CancelPhase
from taskq_core.worker.actor_thread import ActorThread
from taskq_core.worker.batch_hook import (
    status_as_written,
    status_if_cancelled,
    status_of_reschedule,
    status_of_row,
)
from taskq_core.worker.cancel import lose
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.progress import JobProgress, held_publisher, publisher_of
from taskq_core.worker.transient import TRANSIENT_ERRORS, Backoff, retry_pause, shielded

UNKNOWN_ACTOR_SNOOZE = timedelta(seconds=10)
T = TypeVar("T")


def _error_info(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        error_class=type(exc).__name__,
        message=str(exc) or type(exc).__name__,
        traceback="".join(traceback.format_exception(exc)),
    )


def encode_result(value: Any, max_bytes: int) -> str | None:
    """The actor's return value as stored (pydantic models dumped): JSON text, or None.

    Raises UnstorableValueError when the value cannot be stored: not JSON, or larger than
    ``max_bytes`` (TASKQ_MAX_RESULT_BYTES).
    """
    if value is None:
        return None
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = jsontext.encode(value)
    check_result_size(text, max_bytes)
    return text


class ConsumerLoop:
    """One of ``max_concurrency`` consumers."""

    def __init__(self, deps: WorkerDeps, index: int) -> None:
        self.deps = deps
        self.index = index

    async def run(self) -> None:
        """Take and execute jobs until consumers are told to stop."""
        deps = self.deps
        async with held_publisher(
            deps.worker_id, deps.settings, clock=deps.clock, log=deps.log
        ):  # fmt: skip
            await self._take_jobs()

    async def _take_jobs(self) -> None:
        deps = self.deps
        queue = deps.local_queue
        stop_waiter = asyncio.ensure_future(deps.consumer_stop.wait())
        try:
            while not deps.consumer_stop.is_set():
                if not queue.empty():  # the hot path under load: no waiting machinery at all
                    await execute_job(deps, queue.get_nowait())
                    continue
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    {getter, stop_waiter}, return_when=asyncio.FIRST_COMPLETED
                )
                if getter not in done:
                    getter.cancel()
                    break
                await execute_job(deps, getter.result())
        finally:
            stop_waiter.cancel()


async def execute_job(deps: WorkerDeps, held: ActiveJob) -> str:
    """Run one claimed job and record its outcome; returns the outcome name."""
    if held.lost is not None:
        deps.active.remove(held)
        return "lost"
    job = held.job
    started = deps.clock.monotonic()
    if deps.telemetry:
        with consumer_span(
            deps.labels, job.actor, job.queue, str(job.id), job.attempt,
            job.trace_id, job.span_id, held.dispatch_span,
        ) as span:  # fmt: skip
            outcome = await _execute(deps, held)
            span.set_attribute("taskq.outcome", outcome)
    else:
        outcome = await _execute(deps, held)
    if deps.metering:
        seconds = deps.clock.monotonic() - started
        record_job(job.actor, job.queue, outcome, deps.settings.worker_group, seconds)
    return outcome


async def _execute(deps: WorkerDeps, held: ActiveJob) -> str:
    """Run the job with its fields bound to the log context: every line the actor and this
    consumer write about it carries them (a plain ``def`` actor's thread too)."""
    job = held.job
    tokens = bind_job_context(
        job_id=str(job.id),
        actor=job.actor,
        queue=job.queue,
        attempt=job.attempt,
        trace_id=recording_trace_id(job.trace_id) if deps.telemetry else job.trace_id,
        identity_key=job.identity_key,
    )
    try:
        return await _run(deps, held)
    finally:
        unbind_job_context(tokens)


async def _run(deps: WorkerDeps, held: ActiveJob) -> str:
    job, lease = held.job, held.lease
    ref = deps.registry.get(job.actor)
    if ref is None:
        deps.log.error("dispatch_actor_not_found", job_id=str(job.id), actor=job.actor)
        deps.active.settle(held)
        await _settle(
            deps,
            held,
            lambda: deps.backend.mark_snoozed(lease, UNKNOWN_ACTOR_SNOOZE),
            status_of_reschedule,
        )
        return "snoozed"
    try:
        payload = ref.validate_payload(job.payload)
    except PayloadValidationError as exc:
        error = _error_info(exc)
        deps.active.settle(held)
        await _settle(
            deps, held, lambda: deps.backend.mark_failed_or_retry(lease, error, None), status_of_row
        )
        deps.stats.failed += 1
        return "failed"
    limited = deps.limiter is not None and deps.limiter.applies(ref.name, job.queue)
    if limited:
        refused = await _admit(deps, ref, held, payload)
        if refused is not None:
            return refused
    if not await _clear_to_start(deps, held):
        if limited:
            await _release_slots(deps, held, abandoned=False)
        return "lost"
    transaction = AsyncExitStack()
    connection: list[Any] = []

    async def open_connection() -> Any:
        if not connection:
            connection.append(await transaction.enter_async_context(deps.backend.transaction()))
        return connection[0]

    made: list[JobProgress] = []

    def new_progress() -> JobProgress:
        made.append(
            JobProgress(
                lease,
                seq=job.progress_seq,  # a new attempt goes on from the seq its row holds
                backend=deps.backend,
                clock=deps.clock,
                interval=deps.settings.progress_flush_interval,
                log=deps.log,
                database=deps.database,
                publisher=publisher_of(deps.worker_id),
                # Weak: the progress lives on the job's context, which the holding keeps.
                lost=functools.partial(_lease_lost, weakref.ref(held)),
            )
        )
        return made[0]

    held.ctx = JobContext(
        job_id=job.id,
        attempt=job.attempt,
        worker_id=deps.worker_id,
        actor=job.actor,
        queue=job.queue,
        payload=payload,
        metadata=dict(job.metadata),
        _open_connection=open_connection,
        # A plain def actor reports from its thread, which cannot make one: made here.
        _progress=None if ref.is_async else new_progress(),
        _progress_factory=new_progress,
    )
    held.in_thread = not ref.is_async
    deps.active.start(held, deps.clock.monotonic())
    # The start mark of most bodies goes to the completer, batched, once the body is really
    # called (_check_lease_at_start): a body refused at its start leaves no start behind.
    if job.unstarted_reclaims and not await _record_start(deps, held):
        if limited:
            await _release_slots(deps, held, abandoned=False)
        deps.active.remove(held)
        return "lost"
    outcome = "crashed"
    try:
        outcome, value = await _invoke(deps, ref, held, payload)
    finally:
        if limited:
            await _release_slots(deps, held, abandoned=outcome == "abandoned")
        if made and made[0].used:  # the last report goes before the outcome, unless gone
            await made[0].finish(write=outcome not in ("abandoned", "crashed"))
    ran_for = held.ran_for(deps.clock.monotonic())
    if outcome == "unstarted":  # nothing ran: dropped unwritten, as a claim past its deadline
        lose(deps, held, "lease_expired")
        deps.active.remove(held)
        return "lost"
    if outcome == "abandoned":
        if connection and held.task is not None:  # roll back once the body lets go of it
            held.task.add_done_callback(lambda _: _roll_back_later(transaction))
        return "abandoned"
    deps.active.settle(held)
    if connection:
        return await _record_in_transaction(
            deps, ref, held, outcome, value, transaction, connection[0], ran_for
        )
    return await _record(deps, ref, held, outcome, value, ran_for)


async def _clear_to_start(deps: WorkerDeps, held: ActiveJob) -> bool:
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


def _lease_lost(held: weakref.ref[ActiveJob]) -> bool:
    job = held()
    return job is None or job.lost is not None


async def _record_start(deps: WorkerDeps, held: ActiveJob) -> bool:
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
        try:
            written = await shielded(deps.backend.mark_started_many(deps.worker_id, [start]))
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


async def _admit(deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any) -> str | None:
    """Admit the job under its actor's limits: None when admitted, else the outcome written
    (``rate_limited``: back to scheduled at the limiter's retry_after, its attempt given back
    and the limit named in the event; ``failed``: a keyed limit cannot name its key).

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
    state = await _settle(
        deps,
        held,
        lambda: deps.backend.mark_retry_after(
            lease, verdict.retry_after, consume_budget=False, reason=verdict.reason
        ),
        status_of_reschedule,
    )
    deps.stats.rate_limited += 1
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
    """A keyed limit cannot name this job's key: it fails for good, saying why."""
    error = ErrorInfo("RateLimitKeyError", str(exc))
    deps.active.settle(held)
    await _settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(held.lease, error, None),
        status_of_row,
    )
    deps.log.warning("job_limit_key_failed", job_id=str(held.job.id), error=error.message)
    deps.stats.failed += 1
    return "failed"


async def _release_slots(deps: WorkerDeps, held: ActiveJob, *, abandoned: bool) -> None:
    """Give back the job's reservation slots once its body ended. A body written off as
    abandoned may still run: its slots are no longer renewed, and Sweep 4 frees them once
    their lease runs out. A release that fails is left to the same lease."""
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


_ROLLBACKS: set[asyncio.Future[Any]] = set()  # held until done, so none is collected early


def _roll_back_later(transaction: AsyncExitStack) -> None:
    exc = RuntimeError("abandoned")
    rollback = asyncio.ensure_future(transaction.__aexit__(type(exc), exc, None))
    _ROLLBACKS.add(rollback)
    rollback.add_done_callback(_ROLLBACKS.discard)


async def _invoke(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any
) -> tuple[str, Any]:
    """Run the actor in its own task; classify how it ended as (outcome, value)."""
    ctx = held.ctx
    assert ctx is not None

    def arguments(di_kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(di_kwargs)
        if ref.payload_param is not None:
            kwargs[ref.payload_param] = payload
        if ref.context_param is not None:
            kwargs[ref.context_param] = ctx
        return kwargs

    async def call(di_kwargs: dict[str, Any]) -> Any:
        kwargs = arguments(di_kwargs)
        if ref.is_async:
            _check_lease_at_start(deps, held)
            _mark_start(deps, held)
            return await ref.fn(**kwargs)
        loop = asyncio.get_running_loop()
        # The thread runs in a copy of this task's context: the job's log fields go with it.
        body = functools.partial(
            contextvars.copy_context().run,
            _start_in_thread,
            deps,
            held,
            loop,
            functools.partial(ref.fn, **kwargs),
        )
        thread = held.thread = loop.run_in_executor(deps.executor, body)
        return await _until_thread_ends(deps, held, thread)

    async def call_with_dependencies() -> Any:
        if ref.is_async or not deps.scopes.uses_thread_scope(ref.dependency_params):
            async with actor_scope(deps.scopes, ref.dependency_params) as di_kwargs:
                return await call(di_kwargs)
        # THREAD-scoped values belong to the thread that runs the body: hold one first.
        loop = asyncio.get_running_loop()
        seat = ActorThread(loop, contextvars.copy_context())
        thread = held.thread = loop.run_in_executor(deps.executor, seat.serve)
        try:
            await seat.claimed()
            async with actor_scope(deps.scopes, ref.dependency_params, seat) as di_kwargs:
                fn = functools.partial(ref.fn, **arguments(di_kwargs))
                seat.run(functools.partial(_start_in_thread, deps, held, loop, fn))
                return await _until_thread_ends(deps, held, thread)
        finally:
            seat.release()

    body = call_with_dependencies() if ref.dependency_params else call({})
    if ref.timeout is not None:
        body = _with_timeout(body, ref.timeout.total_seconds())
    task = asyncio.create_task(body)
    held.task = task
    deps.active.body_began(held)
    # Settled when the task ends or the heartbeat abandons it: a plain future and a done
    # callback cost far less per job than asyncio.wait over two awaitables.
    settled = held.settled = asyncio.get_running_loop().create_future()
    task.add_done_callback(lambda _: _task_ended(deps, held))
    try:
        await settled
    except asyncio.CancelledError:
        # The consumer itself is torn down (hard stop): the job task goes with it, and the
        # row stays running until its lease expires and the leader reclaims it.
        task.cancel()
        raise
    if not task.done():
        return "abandoned", None  # ignored even the forced cancel; its write is done already
    try:
        value = task.result()
    except _LeaseGoneAtStart:
        return "unstarted", None  # the body was not called: its lease may have run out
    except asyncio.CancelledError:
        return "cancelled", None  # the job task was cancelled: a forced cancel
    except Snooze as exc:
        return "snooze", exc
    except RetryAfter as exc:
        return "retry_after", exc
    except _AttemptTimeout as exc:
        return "error", TimeoutError(f"attempt exceeded its timeout of {exc.seconds:g}s")
    except Exception as exc:
        return "error", exc
    if ctx.interrupted:
        return "cancelled", None  # a cooperative exit: the actor saw the signal and stopped
    return "returned", value


class _LeaseGoneAtStart(Exception):
    """The body was about to be called on a lease that may have run out."""


def _check_lease_at_start(deps: WorkerDeps, held: ActiveJob) -> None:
    """The last check before the actor's function is called (its DI resolved, its thread
    free): the lease is still this worker's to vouch for. A thread may take its work up long
    after it was queued, a stopped process resumes its threads with the loop, and providers
    may await: so the check is made again right here, in the thread that runs the body. A
    start written (awaited) just before the body already was that check."""
    if held.lost is not None:
        raise _LeaseGoneAtStart
    if not held.start_written and deps.active.expired(held, deps.clock.monotonic()):
        raise _LeaseGoneAtStart
    held.body_ran = True


def _mark_start(deps: WorkerDeps, held: ActiveJob) -> None:
    """The body was called: its start mark goes to the completer (batched), unless it was
    written before the body."""
    if not held.start_written:
        deps.completer.submit_start(held)


def _start_in_thread(
    deps: WorkerDeps,
    held: ActiveJob,
    loop: asyncio.AbstractEventLoop,
    fn: Callable[[], T],
) -> T:
    """Run a plain ``def`` body in its thread, its lease checked first."""
    _check_lease_at_start(deps, held)
    loop.call_soon_threadsafe(_mark_start, deps, held)
    return fn()


def _task_ended(deps: WorkerDeps, held: ActiveJob) -> None:
    """The body's task is done: the body is over, unless its thread still runs (a written
    off ``def`` body), which then ends it when it returns."""
    held.abandon()
    thread = held.thread
    if thread is None or thread.done():
        deps.active.body_stopped(held, deps.clock.monotonic())
    else:
        thread.add_done_callback(lambda _: deps.active.body_stopped(held, deps.clock.monotonic()))


async def _until_thread_ends(deps: WorkerDeps, held: ActiveJob, thread: Awaitable[T]) -> T:
    """Await a plain ``def`` actor's thread. A thread cannot be killed: a cancel (forced, a
    timeout) does not end the body while the thread runs, so the job is only ever recorded
    as stopped once it really stopped, or abandoned when it never does."""
    future = asyncio.ensure_future(thread)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
            break
        except asyncio.CancelledError:
            if future.done():
                break
            if held.cancel_phase >= CancelPhase.ABANDON_PENDING or deps.shutdown_event.is_set():
                raise  # written off (or the worker is gone): stop waiting for the thread
            if not cancelled:
                cancelled = True
                deps.log.warning(
                    "job_thread_still_running",
                    job_id=str(held.job.id),
                    note="the actor runs in a thread, which a cancel cannot stop; the job "
                    "stays running until the thread returns",
                )
    if cancelled:
        raise asyncio.CancelledError
    return result


class _AttemptTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


async def _with_timeout(coro: Any, seconds: float | None) -> Any:
    if seconds is None:
        return await coro
    try:
        async with asyncio.timeout(seconds):
            return await coro
    except TimeoutError:
        raise _AttemptTimeout(seconds) from None


async def _record(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, outcome: str, value: Any, ran_for: float
) -> str:
    """Write the outcome; every write is fenced by the lease and a no-op once it is lost."""
    backend, lease = deps.backend, held.lease
    if outcome == "abandoned":
        return "abandoned"
    if held.lost is not None:
        deps.active.remove(held)
        _note_lost_body(deps, held)
        return "lost"
    if outcome == "cancelled":
        return await _record_cancel(deps, held, ran_for)
    if outcome == "returned":
        try:
            result = encode_result(value, deps.settings.max_result_bytes)
        except jsontext.UnstorableValueError as exc:
            return await _record_unstorable(deps, held, exc, ran_for)
        deps.completer.submit(
            held, Success(lease.job_id, lease.attempt, result, ref.result_ttl, ran_for)
        )
        deps.stats.succeeded += 1
        return "succeeded"
    if outcome == "snooze":
        state = await _settle(
            deps,
            held,
            lambda: backend.mark_snoozed(lease, value.delay, ran_for=ran_for),
            status_of_reschedule,
        )
        if state == "failed":
            deps.stats.failed += 1
        return "snoozed" if state == "scheduled" else str(state)
    if outcome == "retry_after":
        result_state = await _settle(
            deps,
            held,
            lambda: backend.mark_retry_after(
                lease, value.delay, consume_budget=value.consume_budget, ran_for=ran_for
            ),
            status_of_reschedule,
        )
        if str(result_state).startswith("failed"):
            deps.stats.failed += 1
        return str(result_state)
    return await _record_error(deps, ref, held, value, ran_for)


async def _record_in_transaction(
    deps: WorkerDeps,
    ref: ActorRef,
    held: ActiveJob,
    outcome: str,
    value: Any,
    transaction: AsyncExitStack,
    connection: Any,
    ran_for: float,
) -> str:
    """The actor used ``ctx.connection()``: its writes commit only with its success.

    Any other outcome rolls them back first and is then written as usual. The success is
    fenced like every write: a lease lost meanwhile rolls the actor's writes back too, so
    they happen once, in the attempt that is recorded as succeeded.
    """
    if outcome != "returned" or held.lost is not None:
        await transaction.__aexit__(RuntimeError, RuntimeError("rolled back"), None)
        return await _record(deps, ref, held, outcome, value, ran_for)
    lease = held.lease
    try:
        result = encode_result(value, deps.settings.max_result_bytes)
    except jsontext.UnstorableValueError as exc:
        await transaction.__aexit__(type(exc), exc, None)
        return await _record_unstorable(deps, held, exc, ran_for)
    try:
        written = await shielded(
            deps.backend.mark_succeeded_with_conn(
                connection, lease, result, fallback_result_ttl=ref.result_ttl, ran_for=ran_for
            )
        )
    except BaseException as exc:
        await transaction.__aexit__(type(exc), exc, None)
        deps.active.remove(held)
        deps.log.error(
            "transactional_completion_failed",
            job_id=str(lease.job_id),
            error=str(exc) or type(exc).__name__,
            note="the actor's writes were rolled back with it; the job runs again once its "
            "lease expires",
        )
        return "lost"
    if not written:
        await transaction.__aexit__(RuntimeError, RuntimeError("lease lost"), None)
        deps.active.remove(held)
        _note_lost_body(deps, held)
        deps.log.warning(
            "transactional_completion_fenced",
            job_id=str(lease.job_id),
            note="the lease was lost: the actor's writes were rolled back",
        )
        return "lost"
    try:
        await shielded(transaction.aclose())  # COMMIT: the writes and the success
    except TRANSIENT_ERRORS as exc:
        deps.log.error(
            "transactional_commit_failed",
            job_id=str(lease.job_id),
            error=str(exc),
            note="committed or rolled back as one: either the job succeeded with its writes, "
            "or both were undone and it runs again once its lease expires",
        )
        deps.active.remove(held)
        return "lost"
    hooks = deps.completer.hooks  # committed: a batch child's hook releases it
    if (
        BATCH_ID_KEY not in held.job.metadata
        or hooks.submit_write(held, JobStatus.SUCCEEDED) is None
    ):
        deps.active.remove(held)
    deps.stats.succeeded += 1
    return "succeeded"


async def _record_unstorable(
    deps: WorkerDeps, held: ActiveJob, exc: Exception, ran_for: float
) -> str:
    """A return value the queue cannot store fails the job for good, saying why."""
    error = ErrorInfo("UnstorableResult", f"the actor's return value is {exc}")
    await _settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(held.lease, error, None, ran_for=ran_for),
        status_of_row,
    )
    deps.log.warning("job_result_unstorable", job_id=str(held.job.id), error=error.message)
    deps.stats.failed += 1
    return "failed"


async def _record_error(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, exc: BaseException, ran_for: float
) -> str:
    job = held.job
    delay = ref.retry.next_delay(
        job.attempts_used, max_retry_backoff=deps.settings.max_retry_backoff
    )
    row = await _settle(
        deps,
        held,
        lambda: deps.backend.mark_failed_or_retry(
            held.lease, _error_info(exc), delay, ran_for=ran_for
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
        deps.stats.failed += 1
        return "failed"
    if row is not None and row.status.value == "cancelled":
        deps.stats.cancelled += 1
        return "cancelled"
    deps.stats.retried += 1
    return "retried"


def _note_lost_body(deps: WorkerDeps, held: ActiveJob) -> None:
    """A body ran under a lease this worker lost: its row in the attempt history (a lease
    given up while the database was away is handed back by the heartbeat, which records
    the body itself)."""
    if held.body_ran and held.lost != "heartbeat_lost":
        deps.completer.submit_lost(held)


async def _record_cancel(deps: WorkerDeps, held: ActiveJob, ran_for: float) -> str:
    """A cancelled run: a shutdown's interruption goes back to the queue, its budget
    unspent (a requested cancel still wins there: the database ends it cancelled); a
    requested cancel ends ``cancelled`` unless the heartbeat already owns the (abandoned)
    terminal write."""
    if held.cancel_phase >= CancelPhase.ABANDON_PENDING:
        return "abandoned"
    lease = held.lease
    if held.cancel_reason == "shutdown":
        await _settle(
            deps,
            held,
            lambda: deps.backend.mark_interrupted(lease, reason="shutdown", ran_for=ran_for),
            status_as_written,
        )
        return "interrupted"
    await _settle(
        deps,
        held,
        lambda: deps.backend.mark_cancelled(lease, ran_for=ran_for),
        status_if_cancelled,
    )
    deps.stats.cancelled += 1
    return "cancelled"


async def _settle(
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
                    _note_lost_body(deps, held)
                    return None
                await retry_pause(deps.database, backoff.next())
                continue
            deps.database.succeeded()
            if BATCH_ID_KEY in held.job.metadata:  # the one lookup a job outside a batch pays
                ended = status(result)
                applied = deps.completer.hooks.submit_write(held, ended)
                hooked = applied is not None
                if applied is not None and ended is JobStatus.FAILED:
                    # It may abort the batch: this consumer starts no other child before.
                    await shielded(applied)
            return result
    finally:
        if not hooked:
            deps.active.remove(held)
