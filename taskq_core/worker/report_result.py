"""Report-result: how an ended body's outcome is recorded, a success written here.

A return value is encoded to JSON once, here; one that cannot be stored (not JSON, or over
TASKQ_MAX_RESULT_BYTES) fails the job (UnstorableResult, not retried) instead of leaving it
running, so no oversized result reaches the completer or a settle. A success goes to the
completer (batched); when the actor used ``ctx.connection()`` it is written in that
transaction and commits with the actor's own writes. The actor's Snooze and RetryAfter are
written here too; failures, cancels and lost leases go to ``report_error``. A lease lost
meanwhile writes nothing: the reclaimed attempt wins.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from pydantic import BaseModel

from taskq_core import jsontext
from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Success
from taskq_core.backend.protocol.sizes import check_result_size
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob
from taskq_core.worker.batch_hook import is_hooked, status_of_reschedule
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.report_error import (
    note_lost_body,
    record_cancel,
    record_error,
    record_unstorable,
    settle,
)
from taskq_core.worker.transient import TRANSIENT_ERRORS, shielded


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


async def record(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, outcome: str, value: Any, ran_for: float
) -> str:
    """Write the outcome; every write is fenced by the lease and a no-op once it is lost."""
    backend, lease = deps.backend, held.lease
    if outcome == "abandoned":
        return "abandoned"
    if held.lost is not None:
        deps.active.remove(held)
        note_lost_body(deps, held)
        return "lost"
    if outcome == "cancelled":
        return await record_cancel(deps, held, ran_for)
    if outcome == "returned":
        try:
            result = encode_result(value, deps.settings.max_result_bytes)
        except jsontext.UnstorableValueError as exc:
            return await record_unstorable(deps, held, exc, ran_for)
        # An ephemeral actor's job leaves no row, unless a hook, a step or a key reads it.
        job = held.job
        ephemeral = ref.ephemeral and not is_hooked(job.metadata) and job.unique_key is None
        deps.completer.submit(
            held, Success(lease.job_id, lease.attempt, result, ref.result_ttl, ran_for, ephemeral)
        )
        deps.state.stats.succeeded += 1
        return "succeeded"
    # Snooze and RetryAfter are written inline, not through report_error: no extra await.
    if outcome == "snooze":
        state = await settle(
            deps,
            held,
            lambda: backend.mark_snoozed(lease, value.delay, ran_for=ran_for),
            status_of_reschedule,
        )
        if state == "failed":
            deps.state.stats.failed += 1
        return "snoozed" if state == "scheduled" else str(state)
    if outcome == "retry_after":
        result_state = await settle(
            deps,
            held,
            lambda: backend.mark_retry_after(
                lease, value.delay, consume_budget=value.consume_budget, ran_for=ran_for
            ),
            status_of_reschedule,
        )
        if str(result_state).startswith("failed"):
            deps.state.stats.failed += 1
        return str(result_state)
    return await record_error(deps, ref, held, value, ran_for)


async def record_in_transaction(
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
        return await record(deps, ref, held, outcome, value, ran_for)
    lease = held.lease
    try:
        result = encode_result(value, deps.settings.max_result_bytes)
    except jsontext.UnstorableValueError as exc:
        await transaction.__aexit__(type(exc), exc, None)
        return await record_unstorable(deps, held, exc, ran_for)
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
        note_lost_body(deps, held)
        deps.log.warning(
            "transactional_completion_fenced",
            job_id=str(lease.job_id),
            note="the lease was lost: the actor's writes were rolled back",
        )
        return "lost"
    try:
        await shielded(transaction.aclose())  # COMMIT: the writes and the success
    except TRANSIENT_ERRORS as exc:
        # Alike Completer.close's unwritten completions (completer.py) by shape only: a transient
        # error logged with what becomes of the job.
        deps.log.error(
            "transactional_commit_failed",
            job_id=str(lease.job_id),
            error=str(exc),
            note="committed or rolled back as one: either the job succeeded with its writes, "
            "or both were undone and it runs again once its lease expires",
        )
        deps.active.remove(held)
        return "lost"
    hooks = deps.completer.hooks  # committed: a batch child's or a step's hook releases it
    if not is_hooked(held.job.metadata) or hooks.submit_write(held, JobStatus.SUCCEEDED) is None:
        deps.active.remove(held)
    deps.state.stats.succeeded += 1
    return "succeeded"


_ROLLBACKS: set[asyncio.Future[Any]] = set()  # held until done, so none is collected early


def roll_back_later(transaction: AsyncExitStack) -> None:
    """Roll an abandoned body's transaction back once the body lets go of it."""
    exc = RuntimeError("abandoned")
    rollback = asyncio.ensure_future(transaction.__aexit__(type(exc), exc, None))
    _ROLLBACKS.add(rollback)
    rollback.add_done_callback(_ROLLBACKS.discard)
