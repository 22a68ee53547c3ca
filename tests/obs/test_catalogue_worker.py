"""A worker's own instruments, each driven by its event on the memory backend: the state
gauges while a job runs (and nothing once the worker is gone, however many run in the
process), a cancel's phases, a shutdown, a sibling crash, a watchdog trip, a database outage,
a heartbeat lost, a body that blocks the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.clock import FakeClock
from taskq_core.errors import DatabaseUnavailableError, TransientDatabaseError
from taskq_core.obs.logs import get_logger
from taskq_core.obs.metrics import instruments
from taskq_core.worker import watchdog
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.heartbeat import HeartbeatLoop
from taskq_core.worker.producer import ProducerLoop
from taskq_core.worker.runtime import Worker
from taskq_core.worker.transient import DatabaseOutage
from tests.conformance.states import running_job
from tests.obs.otel_sdk import Sdk
from tests.worker.sweep_support import memory_deps, until

release = asyncio.Event()
started: list[str] = []


@actor(name="holds")
async def holds(payload: dict[str, Any]) -> None:
    started.append(payload["tag"])
    await release.wait()


@actor(name="stubborn")
async def stubborn(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    started.append("stubborn")
    await asyncio.Event().wait()  # ignores its cancel_event: only a forced cancel ends it


@actor(name="polite")
async def polite(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    started.append("polite")
    await ctx.cancel_event.wait()
    started.append("asked to stop")
    await release.wait()  # the test reads the shutdown phase meanwhile


@actor(name="blocks_the_loop")
async def blocks_the_loop(payload: dict[str, Any]) -> None:
    time.sleep(payload["seconds"])  # noqa: ASYNC251 - the stall under test


@pytest.fixture(autouse=True)
def fresh_events() -> None:
    global release
    release = asyncio.Event()
    started.clear()


def gauge(sdk: Sdk, name: str, **attributes: Any) -> float | None:
    """The gauge's value now, or None when nothing reports it."""
    points = sdk.points(name)
    return sdk.value(name, **attributes) if points else None


async def test_gauges_report_running_workers_and_forget_stopped_ones(
    sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    backends = [InMemoryBackend(), InMemoryBackend()]
    for n, backend in enumerate(backends):
        async with JobsClient(backend=backend) as client:
            await client.enqueue(holds, {"tag": str(n)})
    workers = [make_worker(backend, [holds]) for backend in backends]
    runs = [asyncio.create_task(worker.run()) for worker in workers]
    await until(lambda: len(started) == 2)
    await until(lambda: gauge(sdk, "taskq.maintenance_leader.is_leader") == 1)
    assert gauge(sdk, "taskq.active_jobs") == 2  # two workers in one process add up
    assert gauge(sdk, "taskq.local_queue.jobs") == 0
    assert gauge(sdk, "taskq.database.available") == 1
    assert gauge(sdk, "taskq.shutdown_phase") == 0
    ages = {p.attributes["loop"]: p.value for p in sdk.points("taskq.worker.loop_tick_age_seconds")}
    assert {"producer", "heartbeat", "leader_election"} <= set(ages)
    release.set()
    assert [await asyncio.wait_for(run, 10) for run in runs] == [0, 0]
    for name in (
        "taskq.active_jobs",
        "taskq.maintenance_leader.is_leader",
        "taskq.worker.loop_tick_age_seconds",
        "taskq.shutdown_phase",
    ):
        assert sdk.points(name) == [], name  # fmt: skip


async def test_a_cancel_is_counted_through_its_phases(
    sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(stubborn, {})
        worker = make_worker(backend, [stubborn])
        run = asyncio.create_task(worker.run())
        await until(lambda: started == ["stubborn"])
        await client.cancel(job.id)
        assert await asyncio.wait_for(run, 10) == 0
    for phase in ("cooperative", "forced"):
        counted = sdk.value("taskq.cancellation.phase_transitions", taskq__cancel__phase=phase,
                            taskq__cancel__reason="requested")  # fmt: skip
        assert counted == 1, phase
    assert sdk.value("messaging.client.consumed.messages", taskq__outcome="cancelled") == 1


async def test_a_shutdown_is_timed_and_its_cancels_counted(
    sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        await client.enqueue(polite, {})
    worker = make_worker(backend, [polite], until_idle=False)
    run = asyncio.create_task(worker.run())
    await until(lambda: "polite" in started)
    worker.stop()
    await until(lambda: "asked to stop" in started)
    assert gauge(sdk, "taskq.shutdown_phase") == 2  # CANCELLING, waiting for the job
    release.set()
    assert await asyncio.wait_for(run, 10) == 0
    assert sdk.value("taskq.worker.shutdown_duration_seconds") == 1
    assert sdk.value("taskq.cancellation.phase_transitions", taskq__cancel__phase="cooperative",
                     taskq__cancel__reason="shutdown") == 1  # fmt: skip


async def test_a_body_that_blocks_the_event_loop_shows_as_loop_lag(
    sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        await client.enqueue(blocks_the_loop, {"seconds": 0.3})
    assert await asyncio.wait_for(make_worker(backend, [blocks_the_loop]).run(), 30) == 0
    [lag] = sdk.points("taskq.worker.loop_lag")
    # The sampler's timer fell due at most one period (50 ms) after the block began and ran
    # only once the block was over: at least 0.25 s late. Healthy samples are the others.
    assert lag.max >= 0.25 and lag.count >= 2


async def test_a_sibling_crash_is_counted_by_loop(
    sdk: Sdk, make_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crashes(self: ProducerLoop) -> None:
        raise RuntimeError("producer bug")

    monkeypatch.setattr(ProducerLoop, "run", crashes)
    worker = make_worker(InMemoryBackend(), [holds], until_idle=False)
    assert await asyncio.wait_for(worker.run(), 10) == 1
    assert sdk.value("taskq.worker.sibling_crashes_total", loop="producer") == 1


def test_a_watchdog_trip_is_counted_by_detector_before_the_exit(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(watchdog.os, "_exit", exit_now)
    with pytest.raises(Exited):
        watchdog.trip(get_logger("test"), "stale-loop", "loops stopped ticking", dump=False)
    assert sdk.value("taskq.worker.watchdog_trips_total", detector="stale-loop") == 1


def test_an_outage_is_counted_when_it_begins_and_timed_when_it_ends(sdk: Sdk) -> None:
    clock = FakeClock()
    outage = DatabaseOutage(clock, get_logger("test"), instruments())
    outage.failed("sweeps", TransientDatabaseError("statement timeout"))  # answered: no outage
    outage.failed("producer", DatabaseUnavailableError("connection refused"))
    outage.failed("heartbeat", DatabaseUnavailableError("connection refused"))
    clock.advance(timedelta(seconds=12))
    outage.succeeded()
    assert sdk.value("taskq.database.retried_calls", loop="sweeps") == 1
    assert sdk.value("taskq.database.outages", loop="producer") == 1
    assert sdk.value("taskq.database.outages") == 1
    [duration] = sdk.points("taskq.database.outage.duration")
    assert (duration.count, duration.sum) == (1, 12.0)


async def test_a_lost_heartbeat_counts_the_isolation_and_the_leases_given_up(sdk: Sdk) -> None:
    deps = memory_deps()
    row, _ = await running_job(deps.backend, worker=deps.worker_id)
    deps.active.claim(row, deps.clock.monotonic())
    loop = HeartbeatLoop(deps, CancelController(deps))
    loop.isolate()
    loop.isolate()  # still isolated: one isolation
    assert sdk.value("taskq.worker.isolations") == 1
    assert sdk.value("taskq.lease.lost", taskq__lease__reason="heartbeat_lost") == 1
    await loop.run_once()  # the database answers: the beat is timed
    assert sdk.value("taskq.heartbeat.duration") == 1
