"""Execute: run a started job's body and say how it ended, as (outcome, value).

The body gets its JobContext (payload, a lazily opened ``ctx.connection()`` transaction, a
progress reporter) and its dependencies resolved (``di.actor_scope``), then runs in its own
task, so a forced cancel can target it: an ``async def`` on the loop, a plain ``def`` in the
worker's executor (THREAD-scoped values resolved in the thread that will run it), under the
actor's timeout. The lease is checked once more right before the function is called
(``admission.check_lease_at_start``), and the start mark submitted only then; for a thread
through ``call_soon_threadsafe`` once the thread really calls it. A thread cannot be killed:
a job is recorded stopped only once its thread returned, or abandoned when it never does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from taskq_core.actors import ActorRef, JobContext
from taskq_core.backend.protocol.workflows import WORKFLOW_STEP_KEY, workflow_id_of
from taskq_core.di import actor_scope
from taskq_core.retry import RetryAfter, Snooze
from taskq_core.worker.active import ActiveJob, CancelPhase
from taskq_core.worker.actor_thread import ActorThread
from taskq_core.worker.admission import LeaseGoneAtStart, check_lease_at_start, mark_start
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.progress import JobProgress, publisher_of
from taskq_core.worker.upstream import read_upstream, reads_upstream
from taskq_core.workflows import WorkflowHandle

T = TypeVar("T")


def job_context(
    deps: WorkerDeps,
    ref: ActorRef,
    held: ActiveJob,
    payload: Any,
    transaction: AsyncExitStack,
    connection: list[Any],
    made: list[JobProgress],
) -> JobContext[Any]:
    """The body's ``ctx``. Its transaction is opened on first use into ``transaction`` and
    ``connection``; its progress reporter, made on first report, lands in ``made``."""
    job, lease = held.job, held.lease
    # Weak: the progress lives on the job's context, which the holding keeps; a strong
    # reference here would make holding and context a cycle only the garbage collector frees.
    held_ref = weakref.ref(held)

    async def open_connection() -> Any:
        if not connection:
            connection.append(await transaction.enter_async_context(deps.backend.transaction()))
        return connection[0]

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
                lost=functools.partial(_lease_lost, held_ref),
            )
        )
        return made[0]

    workflow_id = workflow_id_of(job.metadata)
    workflow = None
    if workflow_id is not None:
        step = str(job.metadata.get(WORKFLOW_STEP_KEY, ""))
        workflow = WorkflowHandle(workflow_id, step, deps.backend, deps.registry)
    # Keyword fields, alike memory/workflows.py's _row, protocol/schedules.py's new_schedule and
    # supervisor/schema.py's _resolve by shape only: other records, other data.
    return JobContext(
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
        workflow=workflow,
    )


def _lease_lost(held: weakref.ref[ActiveJob]) -> bool:
    job = held()
    return job is None or job.lost is not None


async def invoke(deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any) -> tuple[str, Any]:
    """Run the actor in its own task; classify how it ended as (outcome, value)."""
    ctx = held.ctx
    assert ctx is not None
    body: Coroutine[Any, Any, Any]
    if ref.dependency_params:
        body = _call_with_dependencies(deps, ref, held, payload)
    else:
        body = _call(deps, ref, held, payload, {})
    if reads_upstream(ref, held.job):
        body = _with_upstream(deps, held, body)
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
    except LeaseGoneAtStart:
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


def _arguments(
    ref: ActorRef, held: ActiveJob, payload: Any, di_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The body's keyword arguments: its dependencies, its payload and its ``ctx``."""
    kwargs = dict(di_kwargs)
    if ref.payload_param is not None:
        kwargs[ref.payload_param] = payload
    if ref.context_param is not None:
        kwargs[ref.context_param] = held.ctx
    return kwargs


# Module functions, not closures of invoke: a job makes none of them (four closures a job
# were a measurable share of a no-op's cost).
async def _call(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any, di_kwargs: dict[str, Any]
) -> Any:
    kwargs = _arguments(ref, held, payload, di_kwargs)
    if ref.is_async:
        check_lease_at_start(deps, held)
        mark_start(deps, held)
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


async def _call_with_dependencies(
    deps: WorkerDeps, ref: ActorRef, held: ActiveJob, payload: Any
) -> Any:
    if ref.is_async or not deps.scopes.uses_thread_scope(ref.dependency_params):
        async with actor_scope(deps.scopes, ref.dependency_params) as di_kwargs:
            return await _call(deps, ref, held, payload, di_kwargs)
    # THREAD-scoped values belong to the thread that runs the body: hold one first.
    loop = asyncio.get_running_loop()
    seat = ActorThread(loop, contextvars.copy_context())
    thread = held.thread = loop.run_in_executor(deps.executor, seat.serve)
    try:
        await seat.claimed()
        async with actor_scope(deps.scopes, ref.dependency_params, seat) as di_kwargs:
            fn = functools.partial(ref.fn, **_arguments(ref, held, payload, di_kwargs))
            seat.run(functools.partial(_start_in_thread, deps, held, loop, fn))
            return await _until_thread_ends(deps, held, thread)
    finally:
        seat.release()


async def _with_upstream(deps: WorkerDeps, held: ActiveJob, body: Coroutine[Any, Any, Any]) -> Any:
    # A step's inputs, read with its claimed batch (worker.upstream), before its lease check
    # (a failure to read them fails the attempt).
    assert held.ctx is not None
    try:
        held.ctx.upstream = await read_upstream(deps.backend, held)
    except BaseException:
        body.close()  # never started
        raise
    return await body


def _start_in_thread(
    deps: WorkerDeps,
    held: ActiveJob,
    loop: asyncio.AbstractEventLoop,
    fn: Callable[[], T],
) -> T:
    """Run a plain ``def`` body in its thread, its lease checked first."""
    check_lease_at_start(deps, held)
    loop.call_soon_threadsafe(mark_start, deps, held)
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
            if (
                held.cancel_phase >= CancelPhase.ABANDON_PENDING
                or deps.state.shutdown_event.is_set()
            ):
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
