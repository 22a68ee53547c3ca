"""The leader's services as a declared list: every loop the worker starts comes from it (or
from the fixed and optional siblings), and one failing pass of the ``sweeps`` loop does not
skip the passes after it."""

from __future__ import annotations

from datetime import timedelta

import pytest
import structlog

from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.clock import FakeClock
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.worker.leader_services import LEADER_SERVICES
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from tests.worker.sweep_support import MIDNIGHT, memory_deps


def test_each_leader_service_has_one_cadence_and_a_unique_name() -> None:
    names = [service.name for service in LEADER_SERVICES]
    assert len(names) == len(set(names))
    for service in LEADER_SERVICES:
        assert (service.every is None) != (service.schedule is None), service.name


def test_the_optional_services_follow_their_settings() -> None:
    off = memory_deps(otel_enabled=False, jobs_vacuum_enabled=False).settings
    on = memory_deps(otel_enabled=True, jobs_vacuum_enabled=True).settings
    enabled_off = {service.name for service in LEADER_SERVICES if service.enabled(off)}
    enabled_on = {service.name for service in LEADER_SERVICES if service.enabled(on)}
    assert enabled_on - enabled_off == {"leader_sample", "jobs_vacuum"}


async def test_a_failing_pass_is_logged_the_others_run_and_its_error_reaches_the_loop() -> None:
    clock = FakeClock(MIDNIGHT)
    deps = memory_deps(clock)
    late = EnqueueArgs("work", {}, schedule_to_close=timedelta(seconds=1))
    await deps.backend.enqueue(late)
    clock.advance(timedelta(minutes=1))

    async def broken() -> int:
        raise RuntimeError("reclaim broke")

    sweep = MaintenanceSweep(deps)
    sweep.passes = (("reclaimed", broken), *sweep.passes[1:])
    with structlog.testing.capture_logs() as logs, pytest.raises(RuntimeError, match="broke"):
        await sweep.run_once()
    events = {e["event"]: e for e in logs}
    assert events["sweep_pass_failed"]["sweep"] == "reclaimed"
    assert events["sweep_ran"]["deadline_failed"] == 1  # the deadline pass still ran


async def test_the_database_away_stops_the_pass_at_once() -> None:
    deps = memory_deps()
    ran: list[str] = []

    async def away() -> int:
        raise DatabaseUnavailableError("connection refused")

    async def after() -> int:
        ran.append("after")
        return 0

    sweep = MaintenanceSweep(deps)
    sweep.passes = (("reclaimed", away), ("deadline_failed", after))
    with pytest.raises(DatabaseUnavailableError):
        await sweep.run_once()
    assert ran == []
