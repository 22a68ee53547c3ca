"""run_scheduled: a leader-only loop that runs its step at each fire time of a schedule, read
on the injected clock (a FakeClock here), re-planning whenever leadership changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from taskq_core.cron_timing import Schedule
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import run_scheduled
from tests.worker.sweep_support import MIDNIGHT, at, lead, memory_deps, renewed, until

RECHECK = 0.005  # seconds between the loop's clock reads (real time)


@dataclass(frozen=True)
class PlanSpy(Schedule):
    """A schedule that records every time the loop plans from."""

    plans: list[datetime] = field(default_factory=list, compare=False)

    def next_fire(self, after: datetime) -> datetime:
        self.plans.append(after)
        return super().next_fire(after)


@dataclass
class Step:
    """The loop's step: records the clock reading of each run; can fail first."""

    deps: WorkerDeps
    runs: list[datetime] = field(default_factory=list)
    tracked: list[bool] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)

    async def __call__(self) -> None:
        self.runs.append(self.deps.clock.now())
        self.tracked.append("prune" in self.deps.liveness.ages())
        if self.failures:
            raise self.failures.pop(0)


@pytest.fixture
def deps() -> WorkerDeps:
    deps = memory_deps()
    lead(deps)
    return deps


@pytest.fixture
async def loop(deps: WorkerDeps) -> AsyncIterator[tuple[PlanSpy, Step]]:
    """The loop under test, running the 03:00 UTC daily schedule."""
    spy, step = PlanSpy("0 3 * * *"), Step(deps)
    task = asyncio.create_task(run_scheduled(deps, "prune", spy, step, recheck=RECHECK))
    yield spy, step
    deps.state.shutdown_event.set()
    await asyncio.wait_for(task, 5)


def advance_to(deps: WorkerDeps, when: datetime) -> None:
    deps.clock.advance(when - deps.clock.now())  # type: ignore[attr-defined]
    renewed(deps)  # a leader's election renews its lease all along


async def test_the_step_runs_at_the_fire_time_and_the_next_fire_is_planned(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, step = loop
    await until(lambda: spy.plans == [MIDNIGHT])
    reads = _count_clock_reads(deps)
    advance_to(deps, at("02:59") + timedelta(seconds=59))
    await until(lambda: reads() >= 2)  # the loop has looked at 02:59:59 since
    assert step.runs == []
    advance_to(deps, at("03:00"))
    await until(lambda: len(spy.plans) == 2)
    assert step.runs == [at("03:00")]
    assert spy.plans[1] == at("03:00")  # the next fire, tomorrow's, is planned after the run
    advance_to(deps, at("03:00", day=2))
    await until(lambda: len(step.runs) == 2)
    assert step.runs == [at("03:00"), at("03:00", day=2)]


async def test_a_fire_time_missed_while_following_is_not_caught_up(deps: WorkerDeps) -> None:
    deps.state.is_leader.clear()
    spy, step = PlanSpy("0 3 * * *"), Step(deps)
    task = asyncio.create_task(run_scheduled(deps, "prune", spy, step, recheck=RECHECK))
    advance_to(deps, at("04:00"))
    lead(deps)
    await until(lambda: spy.plans == [at("04:00")])
    assert step.runs == []
    advance_to(deps, at("03:00", day=2))
    await until(lambda: step.runs == [at("03:00", day=2)])
    deps.state.shutdown_event.set()
    await asyncio.wait_for(task, 5)


async def test_losing_leadership_during_the_wait_replans_and_never_runs_as_follower(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, step = loop
    await until(lambda: spy.plans == [MIDNIGHT])
    passes = _count_forgets(deps)  # the loop forgets its tick at the top of every pass
    deps.state.is_leader.clear()
    advance_to(deps, at("03:00"))  # the fire time passes while following
    await until(lambda: passes() == 1)  # the wait saw the loss and gave up
    assert step.runs == []
    deps.clock.advance(60)  # type: ignore[attr-defined]
    # Winning again (LeaderElection stamps the term), whether or not the loop saw the gap.
    deps.state.leader_since = deps.clock.monotonic()
    lead(deps)
    await until(lambda: len(spy.plans) == 2)
    assert spy.plans[1] == at("03:01")
    assert step.runs == []


async def test_a_new_leadership_term_replans_even_without_a_visible_gap(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, _ = loop
    await until(lambda: spy.plans == [MIDNIGHT])
    deps.clock.advance(30)  # type: ignore[attr-defined]
    renewed(deps)
    deps.state.leader_since = deps.clock.monotonic()  # lost and won again between two reads
    await until(lambda: len(spy.plans) == 2)
    assert spy.plans[1] == MIDNIGHT + timedelta(seconds=30)


async def test_the_loop_is_untracked_while_it_waits_and_tracked_while_its_step_runs(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, step = loop
    await until(lambda: spy.plans == [MIDNIGHT])
    assert "prune" not in deps.liveness.ages()  # a day-long wait must not look stalled
    advance_to(deps, at("03:00"))
    await until(lambda: len(spy.plans) == 2)
    assert step.tracked == [True]
    assert "prune" not in deps.liveness.ages()


async def test_a_transient_database_error_retries_the_same_fire(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, step = loop
    step.failures.append(DatabaseUnavailableError("connection refused"))
    await until(lambda: spy.plans == [MIDNIGHT])
    advance_to(deps, at("03:00"))
    await until(lambda: len(spy.plans) == 2)
    assert step.runs == [at("03:00"), at("03:00")]
    assert not deps.database.ongoing  # the retry's success ended the outage


async def test_an_unexpected_error_is_logged_and_the_next_fire_planned(
    deps: WorkerDeps, loop: tuple[PlanSpy, Step]
) -> None:
    spy, step = loop
    step.failures.append(RuntimeError("boom"))
    await until(lambda: spy.plans == [MIDNIGHT])
    advance_to(deps, at("03:00"))
    await until(lambda: len(spy.plans) == 2)
    assert step.runs == [at("03:00")]


async def test_shutdown_ends_a_long_wait(deps: WorkerDeps) -> None:
    spy = PlanSpy("0 3 * * *")
    task = asyncio.create_task(
        run_scheduled(deps, "prune", spy, Step(deps), recheck=3600.0)  # wakes on shutdown only
    )
    await until(lambda: spy.plans == [MIDNIGHT])
    deps.state.shutdown_event.set()
    await asyncio.wait_for(task, 5)


def _count_forgets(deps: WorkerDeps) -> Callable[[], int]:
    """Count ``liveness.forget`` calls from here on."""
    liveness = deps.liveness
    original = liveness.forget
    count = [0]

    def counting(name: str) -> None:
        count[0] += 1
        original(name)

    liveness.forget = counting  # type: ignore[method-assign]
    return lambda: count[0]


def _count_clock_reads(deps: WorkerDeps) -> Callable[[], int]:
    """Count the clock's ``now()`` reads from here on."""
    clock = deps.clock
    original = clock.now
    count = [0]

    def counting() -> datetime:
        count[0] += 1
        return original()

    clock.now = counting  # type: ignore[method-assign]
    return lambda: count[0]
