"""ConsumerLoop: takes claimed jobs from the local queue and runs them to a recorded outcome.

Per job (``execute_job``): skip it if its lease was lost while it waited; look up the actor
(unknown: snoozed) and validate the payload (invalid: failed, never retried); admit it and
make sure its body may start (``admission``: limits and reservations, one body per job per
worker, a lease the worker can vouch for, the start mark); run the body (``execute``: its
JobContext and dependencies, its own task, a thread for a plain ``def``, the timeout); give
its reservation slots back as soon as the body ends and write its last progress report; then
write exactly one outcome, fenced by the job's lease (``report_result`` for a success, in the
actor's own transaction when it used ``ctx.connection()``; ``report_error`` for the rest).

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
from contextlib import AsyncExitStack
from typing import Any

from taskq_core.errors import PayloadValidationError
from taskq_core.obs.logs import bind_job_context, recording_trace_id, unbind_job_context
from taskq_core.obs.metrics import record_job
from taskq_core.obs.spans import consumer_span
from taskq_core.worker.active import ActiveJob
from taskq_core.worker.admission import (
    admit,
    clear_to_start,
    record_start,
    release_slots,
    report_start_without_body,
)
from taskq_core.worker.cancel import lose
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.execute import invoke, job_context
from taskq_core.worker.progress import JobProgress, held_publisher
from taskq_core.worker.report_error import fail_invalid_payload, snooze_unknown_actor
from taskq_core.worker.report_result import record, record_in_transaction, roll_back_later


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
        stop_waiter = asyncio.ensure_future(deps.state.consumer_stop.wait())
        try:
            while not deps.state.consumer_stop.is_set():
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
    job_id = str(job.id)
    started = deps.clock.monotonic()
    if deps.state.telemetry:
        with consumer_span(
            deps.labels, job.actor, job.queue, job_id, job.attempt,
            job.trace_id, job.span_id, held.dispatch_span,
        ) as span:  # fmt: skip
            trace_id = recording_trace_id(span, job.trace_id)
            outcome = await _execute(deps, held, job_id, trace_id)
            span.set_attribute("taskq.outcome", outcome)
    else:
        outcome = await _execute(deps, held, job_id, job.trace_id)
    if deps.metering:
        seconds = deps.clock.monotonic() - started
        record_job(job.actor, job.queue, outcome, deps.settings.worker_group, seconds)
    return outcome


async def _execute(deps: WorkerDeps, held: ActiveJob, job_id: str, trace_id: str | None) -> str:
    """Run the job with its fields bound to the log context: every line the actor and this
    consumer write about it carries them (a plain ``def`` actor's thread too)."""
    job = held.job
    tokens = bind_job_context(
        job_id=job_id,
        actor=job.actor,
        queue=job.queue,
        attempt=job.attempt,
        trace_id=trace_id,
        identity_key=job.identity_key,
    )
    try:
        return await _run(deps, held)
    finally:
        unbind_job_context(tokens)


async def _run(deps: WorkerDeps, held: ActiveJob) -> str:
    job = held.job
    ref = deps.registry.get(job.actor)
    if ref is None:
        return await snooze_unknown_actor(deps, held)
    try:
        payload = ref.validate_payload(job.payload)
    except PayloadValidationError as exc:
        return await fail_invalid_payload(deps, held, exc)
    limited = deps.limiter is not None and deps.limiter.applies(ref.name, job.queue)
    if limited:
        refused = await admit(deps, ref, held, payload)
        if refused is not None:
            return refused
    if not await clear_to_start(deps, held):
        if limited:
            await release_slots(deps, held, abandoned=False)
        return "lost"
    transaction = AsyncExitStack()
    connection: list[Any] = []
    made: list[JobProgress] = []
    held.ctx = job_context(deps, ref, held, payload, transaction, connection, made)
    held.in_thread = not ref.is_async
    deps.active.start(held, deps.clock.monotonic())
    # The start mark of most bodies goes to the completer, batched, once the body is really
    # called (check_lease_at_start): a body refused at its start leaves no start behind.
    if job.unstarted_reclaims and not await record_start(deps, held):
        if limited:
            await release_slots(deps, held, abandoned=False)
        deps.active.remove(held)
        return "lost"
    outcome = "crashed"
    try:
        outcome, value = await invoke(deps, ref, held, payload)
    finally:
        if limited:
            await release_slots(deps, held, abandoned=outcome == "abandoned")
        if made and made[0].used:  # the last report goes before the outcome, unless gone
            await made[0].finish(write=outcome not in ("abandoned", "crashed"))
    ran_for = held.ran_for(deps.clock.monotonic())
    if outcome == "unstarted":  # nothing ran: dropped unwritten, as a claim past its deadline
        if held.start_written:
            report_start_without_body(deps, held)
        lose(deps, held, "lease_expired")
        deps.active.remove(held)
        return "lost"
    if outcome == "abandoned":
        if connection and held.task is not None:  # roll back once the body lets go of it
            held.task.add_done_callback(lambda _: roll_back_later(transaction))
        return "abandoned"
    deps.active.settle(held)
    if connection:
        return await record_in_transaction(
            deps, ref, held, outcome, value, transaction, connection[0], ran_for
        )
    return await record(deps, ref, held, outcome, value, ran_for)
