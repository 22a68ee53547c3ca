"""One body per attempt, inside one worker: a body starts only on a lease the worker can vouch
for, a stall gives up what may be gone before anything else runs, a job claimed again waits
for its earlier body, and a body that ran under a lost lease still gets its history row.

Driven through the consumer's ``execute_job`` and the ``StallGuard`` on a FakeClock (the
worker's clock decides every deadline), on the memory backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from taskq_core.actors import ActorRef, JobContext, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, JobRow
from taskq_core.clock import FakeClock
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob, Stage
from taskq_core.worker.cancel import CancelController, lose
from taskq_core.worker.consumer import execute_job
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.runtime import Worker
from taskq_core.worker.stall import StallGuard, StallSensor
from tests.worker.conftest import fast_settings

LEASE = 2.0  # TASKQ_LOCK_LEASE of these workers
BEAT = 0.1  # TASKQ_HEARTBEAT_INTERVAL: the margin kept off a lease's end
DEADLINE = LEASE - BEAT

bodies: list[str] = []  # "start N" / "end N" of every body, N its ctx.attempt
gates: list[asyncio.Event] = []  # async bodies wait on the test's (made in its own loop)
thread_gate = threading.Event()  # thread bodies wait on it


@actor
async def waits(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    bodies.append(f"start {ctx.attempt}")
    try:
        await gates[0].wait()
    finally:
        bodies.append(f"end {ctx.attempt}")
    return "done"


@actor
def waits_in_thread(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    bodies.append(f"start {ctx.attempt}")
    thread_gate.wait(30)
    bodies.append(f"end {ctx.attempt}")
    return "done"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
async def backend(clock: FakeClock) -> AsyncIterator[InMemoryBackend]:
    bodies.clear()
    gates[:] = [asyncio.Event()]
    thread_gate.clear()
    memory = InMemoryBackend(clock=clock)
    yield memory
    gates[0].set()
    thread_gate.set()
    await memory.close()


def worker_deps(backend: InMemoryBackend, clock: FakeClock, **settings: Any) -> WorkerDeps:
    registry: dict[str, ActorRef] = {a.name: a for a in (waits, waits_in_thread)}
    values = {"lock_lease": LEASE, "heartbeat_interval": BEAT, **settings}
    worker = Worker(fast_settings(**values), registry, backend=backend, clock=clock)
    return worker._build_deps(backend)


async def claim(deps: WorkerDeps, actor_name: str = "waits") -> ActiveJob:
    """Enqueue one job and claim it for this worker, as its producer does."""
    await deps.backend.enqueue(EnqueueArgs(actor_name, {}))
    [job] = await deps.backend.dispatch_batch(
        deps.worker_id, ["default"], 1, timedelta(seconds=LEASE)
    )
    held, _ = deps.active.claim(job, deps.clock.monotonic())
    return held


async def claim_again(deps: WorkerDeps, clock: FakeClock, job: JobRow) -> ActiveJob:
    """The lease of ``job`` ran out, the leader reclaimed it and this worker claims it anew."""
    clock.advance(LEASE + 1)
    assert await deps.backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    [again] = await deps.backend.dispatch_batch(
        deps.worker_id, ["default"], 1, timedelta(seconds=LEASE)
    )
    assert again.id == job.id and again.attempt == job.attempt + 1
    held, _ = deps.active.claim(again, deps.clock.monotonic())
    return held


async def until(condition: Any, turns: int = 2000, patience: float = 30.0) -> None:
    """Let the loop run until ``condition()`` holds (the workers' clock is not involved).

    Loop turns first; a condition an actor thread makes true may need the OS to schedule
    that thread, which a busy machine can put off past any number of turns, so then the
    loop polls with short real pauses, up to ``patience`` seconds."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


async def test_a_claim_past_its_lease_deadline_is_dropped_unrun(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock)
    held = await claim(deps)
    clock.advance(DEADLINE)  # the lease may be gone: the leader may have reclaimed it
    assert await execute_job(deps, held) == "lost"
    assert bodies == []
    assert deps.active.get(held.job.id) is None
    row = await backend.get(held.job.id)
    assert row is not None and row.status is JobStatus.RUNNING  # nothing written for it
    assert await backend.get_attempts(held.job.id) == []


async def test_a_claim_inside_its_lease_runs(backend: InMemoryBackend, clock: FakeClock) -> None:
    deps = worker_deps(backend, clock)
    held = await claim(deps)
    clock.advance(DEADLINE - 0.01)
    gates[0].set()
    assert await execute_job(deps, held) == "succeeded"
    assert bodies == ["start 1", "end 1"]


async def test_a_stall_gives_up_every_holding_whose_lease_may_be_gone(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock, max_concurrency=4)
    guard = StallGuard(deps, CancelController(deps))
    running = await claim(deps)
    task = asyncio.create_task(execute_job(deps, running))
    await until(lambda: bodies == ["start 1"])
    prefetched = await claim(deps)
    fresh = await claim(deps)
    settling = await claim(deps)
    deps.active.settle(settling)
    clock.advance(5.0)  # the process was stopped for 5 s
    fresh.renewed_at = clock.monotonic()  # a lease renewed after it (not past its deadline)
    guard.stalled(5.0)
    assert (running.lost, prefetched.lost, fresh.lost, settling.lost) == (
        "stalled",
        "stalled",
        None,
        None,
    )
    assert await task == "lost"  # the body was cancelled, nothing written for it
    assert bodies == ["start 1", "end 1"]
    assert deps.active.get(prefetched.job.id) is None
    assert deps.active.get(fresh.job.id) is fresh and deps.active.get(settling.job.id) is settling
    assert (await backend.get(running.job.id)).status is JobStatus.RUNNING  # type: ignore[union-attr]


async def test_a_stall_drops_a_lapsed_leadership(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock)
    deps.state.leader_renewed_at = clock.monotonic()
    deps.state.is_leader.set()
    guard = StallGuard(deps, CancelController(deps))
    clock.advance(1.0)
    guard.stalled(1.0)
    assert deps.state.is_leader.is_set()  # its lease still holds
    clock.advance(DEADLINE)
    guard.stalled(DEADLINE)
    assert not deps.state.is_leader.is_set()


async def test_the_heartbeat_reports_a_late_wake_as_a_stall_once(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock)
    guard = StallGuard(deps, CancelController(deps))
    stalls: list[float] = []
    guard.stalled = stalls.append  # type: ignore[method-assign]
    due = clock.monotonic()
    guard.check_wake(due, due + BEAT / 2)  # a little late: not a stall
    guard.check_wake(due, due + 3.0)
    assert stalls == [3.0]


async def test_a_stall_the_loop_sensor_handled_is_not_reported_again(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock)
    guard = StallGuard(deps, CancelController(deps))
    due = clock.monotonic()
    clock.advance(3.0)
    guard.stalled(3.0)  # the sensor saw it first, inside the loop's select
    handled = guard.handled_at
    guard.check_wake(due, clock.monotonic())
    assert guard.handled_at == handled


def test_the_sensor_measures_time_outside_select_and_past_its_timeout() -> None:
    now = [100.0]
    sensor = StallSensor(clock=lambda: now[0])
    stalls: list[float] = []
    sensor.watch(1.0, stalls.append)
    sensor.before_select()
    now[0] += 0.5
    assert sensor.after_select(0.5) == 0.0  # slept as long as it asked
    now[0] += 0.2  # callbacks ran 0.2 s
    sensor.before_select()
    now[0] += 4.0  # asked for 0.5 s, woke 4 s later: stopped meanwhile
    assert sensor.after_select(0.5) == pytest.approx(3.5)
    now[0] += 2.0  # a callback held the loop 2 s
    sensor.before_select()
    assert sensor.after_select(0.0) == pytest.approx(2.0)
    assert stalls == [pytest.approx(3.5), pytest.approx(2.0)]


async def test_a_job_claimed_again_waits_for_its_earlier_body_to_end(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    """A thread cannot be stopped: after its lease was lost, the job's next body does not
    start beside it in this worker, but once it returned."""
    deps = worker_deps(
        backend,
        clock,
        lock_lease=200.0,  # room for long graces (a lease outlasts them)
        cancellation_grace_period=30,
        cleanup_grace_period=30,
        termination_grace_period=90,
    )
    first = await claim(deps, "waits_in_thread")
    earlier = asyncio.create_task(execute_job(deps, first))
    await until(lambda: bodies == ["start 1"])
    lose(deps, first, "stalled")  # its thread runs on
    second = await claim_again(deps, clock, first.job)
    later = asyncio.create_task(execute_job(deps, second))
    for _ in range(200):
        await asyncio.sleep(0)
    assert second.stage is Stage.CLAIMED and deps.active.body_of(first.job.id) is first
    thread_gate.set()
    assert await earlier == "lost"
    assert await later == "succeeded"
    assert bodies == ["start 1", "end 1", "start 2", "end 2"]


async def test_a_job_whose_earlier_body_outlives_the_graces_is_handed_back_unstarted(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock, cancellation_grace_period=0.02, cleanup_grace_period=0.02)
    first = await claim(deps, "waits_in_thread")
    earlier = asyncio.create_task(execute_job(deps, first))
    await until(lambda: bodies == ["start 1"])
    lose(deps, first, "stalled")
    second = await claim_again(deps, clock, first.job)
    assert await execute_job(deps, second) == "lost"
    row = await backend.get(first.job.id)
    # Back in the queue, unstarted: the claim used no budget (nor did the first, whose
    # start was never written: it waits in the completer, which does not run here).
    assert row is not None and (row.status, row.attempt, row.attempts_used) == (
        JobStatus.PENDING,
        2,
        0,
    )
    assert bodies == ["start 1"]  # no second body beside the first
    thread_gate.set()
    assert await earlier == "lost"


async def test_a_body_that_ran_under_a_lost_lease_is_in_the_history(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    deps = worker_deps(backend, clock)
    held = await claim(deps)
    task = asyncio.create_task(execute_job(deps, held))
    await until(lambda: bodies == ["start 1"])
    clock.advance(LEASE + 1)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1  # unstarted
    lose(deps, held, "stalled")
    assert await task == "lost"
    await deps.completer.flush_once()
    [attempt] = await backend.get_attempts(held.job.id)
    assert (attempt.attempt, attempt.outcome, attempt.error_class) == (1, "lost", "LeaseLost")
    assert "stalled" in (attempt.error_message or "")
    [again] = await backend.dispatch_batch(deps.worker_id, ["default"], 1, timedelta(seconds=2))
    assert again.attempt == 2  # the next body has a number of its own


async def test_a_thread_body_checks_its_lease_again_when_its_thread_takes_it_up(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    """A ``def`` body is queued for a thread and may be taken up long after (every thread
    busy, or a stopped process resuming its threads before the loop notices): the lease is
    checked again in the thread, right before the actor's function is called."""
    deps = worker_deps(backend, clock, max_concurrency=1)  # one actor thread
    busy = await claim(deps, "waits_in_thread")
    first = asyncio.create_task(execute_job(deps, busy))
    await until(lambda: bodies == ["start 1"])
    queued = await claim(deps, "waits_in_thread")
    second = asyncio.create_task(execute_job(deps, queued))
    await until(lambda: queued.stage is Stage.RUNNING)  # past every check on the loop
    clock.advance(DEADLINE)  # meanwhile its lease may have run out
    busy.renewed_at = clock.monotonic()
    thread_gate.set()
    assert await first == "succeeded"
    assert await second == "lost"
    assert bodies == ["start 1", "end 1"]  # the second body was never called
    await deps.completer.flush_once()
    assert await backend.get_attempts(queued.job.id) == []  # nothing ran: no history row
    row = await backend.get(queued.job.id)
    # Nor a start mark: its reclaim must not count a crash of a body that never ran.
    assert row is not None and row.started_at is None


class _StopsAfterStartWrite:
    """The backend under test, with the process stopped past the lease right after the start
    of a job is written before its body (SIGSTOP between that write and the body's call)."""

    def __init__(self, inner: InMemoryBackend, clock: FakeClock) -> None:
        self._inner = inner
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def mark_started_many(self, worker_id: Any, starts: Any) -> set[Any]:
        written = await self._inner.mark_started_many(worker_id, starts)
        self._clock.advance(LEASE + 1)
        return written


@pytest.mark.parametrize("actor_name", ["waits", "waits_in_thread"])
async def test_a_stop_between_a_written_start_and_the_body_runs_no_body(
    backend: InMemoryBackend, clock: FakeClock, actor_name: str
) -> None:
    deps = worker_deps(backend, clock)
    first = await claim(deps, actor_name)  # its worker died before the batched start mark
    deps.active.remove(first)
    clock.advance(LEASE + 1)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    [again] = await backend.dispatch_batch(deps.worker_id, ["default"], 1, timedelta(seconds=LEASE))
    assert again.unstarted_reclaims == 1  # so its start is written before its body
    held, _ = deps.active.claim(again, clock.monotonic())
    stopping = dataclasses.replace(deps, backend=_StopsAfterStartWrite(backend, clock))  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        assert await execute_job(stopping, held) == "lost"
    assert bodies == []  # the lease may be gone: another worker may run the job now
    reported = [e for e in logs if e["event"] == "job_start_without_body"]
    assert [(e["job_id"], e["attempt"]) for e in reported] == [(str(again.id), again.attempt)]
    row = await backend.get(again.id)
    assert row is not None and row.started_at is not None  # its reclaim counts a crash


class _HoldsStartWrite:
    """The backend under test, its write of a start before the body held until released."""

    def __init__(self, inner: InMemoryBackend) -> None:
        self._inner = inner
        self.writing = asyncio.Event()
        self.release = asyncio.Event()
        self.written = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def mark_started_many(self, worker_id: Any, starts: Any) -> set[Any]:
        self.writing.set()
        await self.release.wait()
        try:
            return await self._inner.mark_started_many(worker_id, starts)
        finally:
            self.written.set()


async def test_a_consumer_cancelled_while_its_start_is_written_says_no_body_ran(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    """A shutdown or a lost lease cancels the consumer while the start it writes before the
    body is on its way: the body does not run, the write lands, and the worker says so."""
    deps = worker_deps(backend, clock)
    first = await claim(deps, "waits")  # its worker died before the batched start mark
    deps.active.remove(first)
    clock.advance(LEASE + 1)
    assert await backend.reclaim_expired_leases(timedelta(0), timedelta(0)) == 1
    [again] = await backend.dispatch_batch(deps.worker_id, ["default"], 1, timedelta(seconds=LEASE))
    held, _ = deps.active.claim(again, clock.monotonic())
    holding = _HoldsStartWrite(backend)
    with structlog.testing.capture_logs() as logs:
        consumer = asyncio.create_task(
            execute_job(dataclasses.replace(deps, backend=holding), held)  # type: ignore[arg-type]
        )
        await holding.writing.wait()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        holding.release.set()
        await holding.written.wait()
        await until(lambda: any(e["event"] == "job_start_without_body" for e in logs))
    assert bodies == []
    reported = [e for e in logs if e["event"] == "job_start_without_body"]
    assert [(e["job_id"], e["attempt"]) for e in reported] == [(str(again.id), again.attempt)]
    row = await backend.get(again.id)
    assert row is not None and row.started_at is not None  # its reclaim counts a crash
