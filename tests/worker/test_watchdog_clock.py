"""The watchdog reads the worker's injected clock: a frozen FakeClock never trips a detector,
and stepping it past a threshold trips the matching one (decided in run_once/check)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.clock import FakeClock
from taskq_core.statemachine import JobStatus
from taskq_core.worker import watchdog
from taskq_core.worker.runtime import Worker
from taskq_core.worker.watchdog import LoopLagWatchdog, LoopLiveness, ShutdownWatchdog

LOG = structlog.get_logger("test")


def frozen_clock() -> FakeClock:
    """A clock that never moves, reading far behind the host's monotonic clock.

    A worker that mixed this clock with ``time.monotonic()`` would see its shutdown budget
    long spent the moment shutdown began (the issue's "exits 2 at once").
    """
    return FakeClock(monotonic=1.0)


@actor
async def echo(payload: dict[str, Any]) -> dict[str, Any]:
    return payload


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record every watchdog trip instead of letting it ``os._exit(2)`` the test process."""
    seen: list[tuple[str, str]] = []

    def record(log: Any, detector: str, reason: str, *, dump: bool = True) -> None:
        seen.append((detector, reason))

    monkeypatch.setattr(watchdog, "trip", record)
    return seen


async def test_a_worker_on_a_frozen_fake_clock_drains_and_exits_0(
    make_worker: Callable[..., Worker], trips: list[tuple[str, str]]
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch([(echo, {"n": n}) for n in range(5)])
    worker = make_worker(backend, [echo], clock=frozen_clock(), watchdog_enabled=True)
    code = await asyncio.wait_for(worker.run(), 20)
    assert (code, trips) == (0, [])
    for row in rows:
        job = await backend.get(row.id)
        assert job is not None and job.status is JobStatus.SUCCEEDED


async def test_a_worker_on_a_frozen_fake_clock_stops_cleanly_on_request(
    make_worker: Callable[..., Worker], trips: list[tuple[str, str]]
) -> None:
    worker = make_worker(
        InMemoryBackend(), [echo], until_idle=False, clock=frozen_clock(), watchdog_enabled=True
    )
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 10)
    worker.stop("test")
    code = await asyncio.wait_for(running, 20)
    assert (code, trips) == (0, [])


def test_a_loop_goes_stale_only_when_the_clock_passes_its_budget() -> None:
    clock = FakeClock()
    liveness = LoopLiveness(clock, grace_factor=5.0, stale_floor=10.0)
    liveness.tick("producer", period=1.0)  # budget: max(1 x 5, 10) = 10 s
    liveness.tick("sweeps", period=30.0)  # budget: max(30 x 5, 10) = 150 s
    clock.advance(10.0)
    assert liveness.stale() == []
    assert liveness.ages() == {"producer": 10.0, "sweeps": 10.0}
    clock.advance(0.5)
    assert liveness.stale() == ["producer"]
    liveness.tick("producer", period=1.0)
    assert liveness.stale() == []


async def test_the_stale_loop_watchdog_trips_when_a_stepped_clock_passes_a_budget(
    trips: list[tuple[str, str]],
) -> None:
    clock = FakeClock()
    liveness = LoopLiveness(clock, grace_factor=5.0, stale_floor=10.0)
    liveness.tick("heartbeat", period=1.0)
    shutdown = asyncio.Event()
    checking = asyncio.create_task(
        watchdog.stale_loop_watchdog(liveness, LOG, check_interval=0.01, shutdown=shutdown)
    )
    async with asyncio.timeout(5):  # each check is a real 10 ms wait; the clock decides
        while not trips:  # the watchdog runs on time while the heartbeat stays silent
            clock.advance(0.1)
            await asyncio.sleep(0.01)
    shutdown.set()
    await asyncio.wait_for(checking, 5)
    assert trips[0] == ("stale-loop", "loops stopped ticking: heartbeat")
    assert clock.monotonic() - 1000.0 > 10.0  # not before the budget


async def test_a_stopped_process_is_not_a_stale_loop(trips: list[tuple[str, str]]) -> None:
    """A SIGSTOP or a VM pause stops the watchdog too: when it finds its own wait far
    overrun, every loop gets a fresh budget instead of a trip."""
    clock = FakeClock()
    liveness = LoopLiveness(clock, grace_factor=5.0, stale_floor=10.0)
    liveness.tick("heartbeat", period=1.0)
    shutdown = asyncio.Event()
    checking = asyncio.create_task(
        watchdog.stale_loop_watchdog(liveness, LOG, check_interval=0.01, shutdown=shutdown)
    )
    await asyncio.sleep(0)  # the first check ran, its wait began
    clock.advance(30.0)  # the whole process was stopped for 30 s
    async with asyncio.timeout(5):
        while liveness.ages()["heartbeat"] >= 30.0:
            await asyncio.sleep(0.01)
    shutdown.set()
    await asyncio.wait_for(checking, 5)
    assert trips == []
    assert liveness.stale() == []


def test_the_loop_lag_thread_counts_its_own_overrun_wait_as_a_stop() -> None:
    clock = FakeClock()
    liveness = LoopLiveness(clock, grace_factor=5.0, stale_floor=10.0)
    lag = LoopLagWatchdog(
        None,  # type: ignore[arg-type]  # never scheduled on: only the checks run
        liveness,
        LOG,
        clock,
        budget=30.0,
        startup_grace=0.0,
        check_interval=1.0,
    )
    waited_from = clock.monotonic()
    clock.advance(31.5)  # the thread itself was stopped: its 1 s wait took 31.5 s
    assert lag.check_after_wait(waited_from) is None
    reasons = []
    for _ in range(31):  # then it wakes on time every second while the loop sends no beat
        waited_from = clock.monotonic()
        clock.advance(1.0)
        reasons.append(lag.check_after_wait(waited_from))
    assert reasons[:30] == [None] * 30
    assert reasons[30] == "event loop blocked for 31.0s"


def test_the_shutdown_deadline_trips_only_once_the_clock_spends_the_budget() -> None:
    clock = FakeClock()
    detector = ShutdownWatchdog(clock, LOG, budget=10.0, dump_interval=2.0, dump_after_fraction=0.5)
    assert detector.run_once().tripped is False  # not armed: no shutdown under way
    detector.arm(clock.monotonic())
    first = detector.run_once()
    assert (first.tripped, first.dump, first.wait) == (False, False, 5.0)
    clock.advance(6.0)
    straggling = detector.run_once()
    assert (straggling.tripped, straggling.dump, straggling.wait) == (False, True, 2.0)
    clock.advance(3.9)
    assert detector.run_once().tripped is False
    clock.advance(0.1)
    assert detector.run_once().tripped is True


async def test_the_shutdown_watchdog_trips_when_a_stepped_clock_passes_the_deadline(
    trips: list[tuple[str, str]],
) -> None:
    clock = FakeClock()
    begun = asyncio.Event()
    detector = ShutdownWatchdog(clock, LOG, budget=10.0, dump_interval=0.01, dump_after_fraction=1)
    clock.advance(10.0)  # the shutdown began 10 s ago by the worker's clock
    begun.set()
    await asyncio.wait_for(detector.run(lambda: clock.monotonic() - 10.0, begun), 5)
    assert trips == [("shutdown-deadline", "shutdown took longer than 10s")]


async def test_loop_lag_is_measured_on_the_injected_clock() -> None:
    clock = FakeClock()
    liveness = LoopLiveness(clock, grace_factor=5.0, stale_floor=10.0)
    lag = LoopLagWatchdog(
        asyncio.get_running_loop(),
        liveness,
        LOG,
        clock,
        budget=30.0,
        startup_grace=60.0,
        check_interval=1.0,
    )
    clock.advance(45.0)
    assert lag.check() is None  # unarmed: within the start-up grace, nothing ticked yet
    liveness.tick("producer", period=1.0)
    clock.advance(30.0)
    assert lag.check() is None
    clock.advance(1.0)
    assert lag.check() == "event loop blocked for 31.0s"
    lag.beat()
    assert lag.check() is None
