"""ConsumerLoop: takes claimed jobs from the local queue and runs them to a recorded outcome.

Per job: look up the actor, validate the payload (invalid = failed, never retried), build the
JobContext, resolve DI, run the actor in its own task (so a forced cancel can target it), then
write exactly one outcome. Outcome writes are shielded: a cancellation of the consumer during
shutdown cannot strand a row in ``running``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import traceback
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from taskq_core.actors import ActorRef, JobContext
from taskq_core.backend.protocol import ErrorInfo, JobRow, Success
from taskq_core.di import actor_scope
from taskq_core.errors import PayloadValidationError
from taskq_core.obs.metrics import consumer_span, instruments
from taskq_core.retry import RetryAfter, Snooze
from taskq_core.worker.active import ActiveJob, CancelPhase
from taskq_core.worker.deps import WorkerDeps

UNKNOWN_ACTOR_SNOOZE = timedelta(seconds=10)


def _error_info(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        error_class=type(exc).__name__,
        message=str(exc) or type(exc).__name__,
        traceback="".join(traceback.format_exception(exc)),
    )


def _jsonable_result(value: Any) -> Any:
    """The actor's return value as stored: pydantic models dumped, everything JSON-checked."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    json.dumps(value)  # raises TypeError/ValueError when the result cannot be stored
    return value


class ConsumerLoop:
    """One of ``max_concurrency`` consumers."""

    def __init__(self, deps: WorkerDeps, index: int) -> None:
        self.deps = deps
        self.index = index

    async def run(self) -> None:
        """Take and execute jobs until consumers are told to stop."""
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


async def execute_job(deps: WorkerDeps, job: JobRow) -> str:
    """Run one claimed job and record its outcome; returns the outcome name."""
    if not deps.telemetry:
        return await _execute(deps, job)
    started = deps.clock.monotonic()
    with consumer_span(job.actor, job.queue, str(job.id), job.trace_id, job.span_id) as span:
        outcome = await _execute(deps, job)
        span.set_attribute("taskq.outcome", outcome)
    attributes = {"taskq.actor": job.actor, "messaging.destination.name": job.queue}
    meters = instruments()
    meters.process_duration.record(deps.clock.monotonic() - started, attributes)
    meters.consumed_messages.add(1, {**attributes, "taskq.outcome": outcome})
    return outcome


async def _execute(deps: WorkerDeps, job: JobRow) -> str:
    ref = deps.registry.get(job.actor)
    if ref is None:
        deps.log.error("dispatch_actor_not_found", job_id=str(job.id), actor=job.actor)
        await _shielded(deps.backend.mark_snoozed(job.id, deps.worker_id, UNKNOWN_ACTOR_SNOOZE))
        return "snoozed"
    try:
        payload = ref.validate_payload(job.payload)
    except PayloadValidationError as exc:
        await _shielded(
            deps.backend.mark_failed_or_retry(job.id, deps.worker_id, _error_info(exc), None)
        )
        deps.stats.failed += 1
        return "failed"
    ctx: JobContext[Any] = JobContext(
        job_id=job.id,
        attempt=job.attempt,
        worker_id=deps.worker_id,
        actor=job.actor,
        queue=job.queue,
        payload=payload,
        metadata=dict(job.metadata),
    )
    active = ActiveJob(job=job, ctx=ctx, started_monotonic=deps.clock.monotonic())
    deps.active.add(active)
    try:
        outcome, value = await _invoke(deps, ref, active, payload)
        return await _record(deps, ref, active, outcome, value)
    finally:
        deps.active.remove(job.id)


async def _invoke(
    deps: WorkerDeps, ref: ActorRef, active: ActiveJob, payload: Any
) -> tuple[str, Any]:
    """Run the actor in its own task; classify how it ended as (outcome, value)."""

    async def call(di_kwargs: dict[str, Any]) -> Any:
        kwargs = dict(di_kwargs)
        if ref.payload_param is not None:
            kwargs[ref.payload_param] = payload
        if ref.context_param is not None:
            kwargs[ref.context_param] = active.ctx
        if ref.is_async:
            return await ref.fn(**kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(deps.executor, functools.partial(ref.fn, **kwargs))

    async def call_with_dependencies() -> Any:
        async with actor_scope(deps.scopes, ref.dependency_params) as di_kwargs:
            return await call(di_kwargs)

    body = call_with_dependencies() if ref.dependency_params else call({})
    if ref.timeout is not None:
        body = _with_timeout(body, ref.timeout.total_seconds())
    task = asyncio.create_task(body)
    active.task = task
    # Settled when the task ends or the heartbeat abandons it: a plain future and a done
    # callback cost far less per job than asyncio.wait over two awaitables.
    settled = active.settled = asyncio.get_running_loop().create_future()
    task.add_done_callback(lambda _: active.abandon())
    try:
        await settled
    except asyncio.CancelledError:
        # The consumer itself is torn down (hard stop): the job task goes with it, and the
        # row stays running until its lease expires and the leader reclaims it.
        task.cancel()
        raise
    if not task.done():
        return "abandoned", None  # ignored even the forced cancel; the heartbeat wrote it off
    try:
        value = task.result()
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
    if active.ctx.interrupted:
        return "cancelled", None  # a cooperative exit: the actor saw the signal and stopped
    return "returned", value


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
    deps: WorkerDeps, ref: ActorRef, active: ActiveJob, outcome: str, value: Any
) -> str:
    """Write the outcome; every write is a guarded no-op if the row is no longer ours."""
    backend, job, worker_id = deps.backend, active.job, deps.worker_id
    if outcome == "abandoned":
        return "abandoned"
    if outcome == "cancelled":
        return await _record_cancel(deps, active)
    if outcome == "returned":
        try:
            result = _jsonable_result(value)
        except (TypeError, ValueError) as exc:
            return await _record_error(deps, ref, active, exc, retry=False)
        deps.completer.submit(Success(job.id, result, ref.result_ttl))
        deps.stats.succeeded += 1
        return "succeeded"
    if outcome == "snooze":
        state = await _shielded(backend.mark_snoozed(job.id, worker_id, value.delay))
        if state == "failed":
            deps.stats.failed += 1
        return "snoozed" if state == "scheduled" else str(state)
    if outcome == "retry_after":
        result_state = await _shielded(
            backend.mark_retry_after(
                job.id, worker_id, value.delay, consume_budget=value.consume_budget
            )
        )
        if str(result_state).startswith("failed"):
            deps.stats.failed += 1
        return str(result_state)
    return await _record_error(deps, ref, active, value, retry=True)


async def _record_error(
    deps: WorkerDeps, ref: ActorRef, active: ActiveJob, exc: BaseException, *, retry: bool
) -> str:
    job = active.job
    delay = (
        ref.retry.next_delay(job.attempt, max_retry_backoff=deps.settings.max_retry_backoff)
        if retry
        else None
    )
    row = await _shielded(
        deps.backend.mark_failed_or_retry(job.id, deps.worker_id, _error_info(exc), delay)
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
    deps.stats.retried += 1
    return "retried"


async def _record_cancel(deps: WorkerDeps, active: ActiveJob) -> str:
    """A cancelled run: a shutdown interruption goes back to the queue; a requested cancel
    ends ``cancelled`` unless the heartbeat already owns the (abandoned) terminal write."""
    job = active.job
    if active.cancel_phase >= CancelPhase.ABANDON_PENDING:
        return "abandoned"
    if active.cancel_reason == "shutdown":
        await _shielded(
            deps.backend.mark_retry_after(
                job.id, deps.worker_id, timedelta(0), consume_budget=False
            )
        )
        return "released"
    await _shielded(deps.backend.mark_cancelled(job.id, deps.worker_id))
    deps.stats.cancelled += 1
    return "cancelled"


async def _shielded(coro: Any) -> Any:
    """Await a database write so that cancelling the caller cannot interrupt it."""
    return await asyncio.shield(coro)
