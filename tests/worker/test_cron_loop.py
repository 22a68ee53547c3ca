"""The leader's cron loop on the memory backend and a FakeClock: ``run_once`` fires what is
due, batch after batch while batches come back full, and logs each fire (a catch-up, a fire
time another leader had made); the gated loop fires only while this worker leads."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import structlog

from taskq_core.backend.protocol import EnqueueArgs, JobFilter, ScheduleSpec, schedule_job_key
from taskq_core.clock import FakeClock
from taskq_core.worker.cron_loop import CronLoop
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.leader import run_gated
from tests.worker.sweep_support import MIDNIGHT, lead, memory_deps, renewed, until

DAY = timedelta(days=1)


def daily(name: str, hhmm: str = "03:00") -> ScheduleSpec:
    hour, minute = hhmm.split(":")
    return ScheduleSpec(name=name, actor="report", cron=f"{int(minute)} {int(hour)} * * *")


@pytest.fixture
def deps() -> WorkerDeps:
    deps = memory_deps(FakeClock(MIDNIGHT))
    lead(deps)
    return deps


def advance(deps: WorkerDeps, delta: timedelta) -> None:
    clock = deps.clock
    assert isinstance(clock, FakeClock)
    clock.advance(delta)
    renewed(deps)  # a leader's election renews its lease all along


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


async def test_a_tick_fires_the_due_schedules_and_logs_each(deps: WorkerDeps) -> None:
    await deps.backend.create_schedule(daily("nightly"))
    await deps.backend.create_schedule(daily("late", "23:00"))
    assert (await CronLoop(deps).run_once()).fired == []
    advance(deps, timedelta(hours=4))  # 03:00 passed, 23:00 not yet
    with structlog.testing.capture_logs() as logs:
        result = await CronLoop(deps).run_once()
    [fire] = result.fired
    assert (fire.name, result.jobs) == ("nightly", 1)
    [logged] = events(logs, "schedule_fired")
    assert logged["schedule"] == "nightly"
    assert logged["fire_time"] == "2026-01-01T03:00:00+00:00"
    assert logged["job_id"] == str(fire.job_id)
    assert logged["next_fire"] == "2026-01-02T03:00:00+00:00"
    assert events(logs, "schedule_caught_up") == []
    jobs = await deps.backend.list_jobs(JobFilter(actor="report"))
    assert [job.id for job in jobs] == [fire.job_id]


async def test_a_catch_up_is_logged_with_the_first_missed_time(deps: WorkerDeps) -> None:
    await deps.backend.create_schedule(daily("nightly"))
    advance(deps, 3 * DAY)
    with structlog.testing.capture_logs() as logs:
        [fire] = (await CronLoop(deps).run_once()).fired
    [caught_up] = events(logs, "schedule_caught_up")
    assert caught_up["schedule"] == "nightly"
    assert caught_up["fire_time"] == "2026-01-03T03:00:00+00:00" == fire.fire_at.isoformat()
    assert caught_up["missed_since"] == "2026-01-01T03:00:00+00:00"


async def test_full_batches_are_followed_at_once_until_one_comes_back_short(
    deps: WorkerDeps,
) -> None:
    for index in range(5):
        await deps.backend.create_schedule(daily(f"s{index}", f"0{index}:30"))
    advance(deps, DAY)
    calls: list[int] = []
    fire = deps.backend.fire_due_schedules

    async def counted(limit: int) -> Any:
        batch = await fire(limit)
        calls.append(len(batch))
        return batch

    deps.backend.fire_due_schedules = counted  # type: ignore[method-assign]
    result = await CronLoop(deps, limit=2).run_once()
    assert calls == [2, 2, 1]
    assert [f.name for f in result.fired] == ["s0", "s1", "s2", "s3", "s4"]
    assert "cron" in deps.liveness.ages()  # each batch was progress


async def test_a_fire_time_made_elsewhere_is_logged_at_debug_only(deps: WorkerDeps) -> None:
    await deps.backend.create_schedule(daily("nightly"))
    advance(deps, timedelta(hours=4))
    key = schedule_job_key("nightly", MIDNIGHT + timedelta(hours=3))
    await deps.backend.enqueue(EnqueueArgs(actor="report", unique_key=key))
    with structlog.testing.capture_logs() as logs:
        result = await CronLoop(deps).run_once()
    assert result.jobs == 0
    assert events(logs, "schedule_fired") == []
    [taken] = events(logs, "schedule_fire_time_taken")
    assert (taken["schedule"], taken["log_level"]) == ("nightly", "debug")


async def test_the_gated_loop_fires_only_while_leading(deps: WorkerDeps) -> None:
    await deps.backend.create_schedule(daily("nightly"))
    advance(deps, timedelta(hours=4))
    deps.state.is_leader.clear()
    cron = CronLoop(deps)
    ticks: list[int] = []

    async def step() -> None:
        ticks.append(len((await cron.run_once()).fired))

    task = asyncio.create_task(run_gated(deps, "cron", 0.01, step))
    try:
        for _ in range(20):  # a follower's loop waits on the gate alone: no timer to run
            await asyncio.sleep(0)
        assert ticks == [] and "cron" not in deps.liveness.ages()
        lead(deps)
        await until(lambda: len(ticks) >= 2)
        assert ticks[0] == 1 and set(ticks[1:]) == {0}
    finally:
        deps.state.shutdown_event.set()
        await asyncio.wait_for(task, 5)
