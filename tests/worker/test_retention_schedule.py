"""A whole worker (memory backend, FakeClock) runs the prune and the archive expiry at the
times their settings name: TASKQ_PRUNE_SCHEDULE_UTC and TASKQ_ARCHIVE_EXPIRY_SCHEDULE_UTC,
or their _CRON_EXPR, which win over the daily time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from datetime import datetime, timedelta
from typing import Any

import pytest
import structlog

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.clock import FakeClock
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.worker.sweep_support import MIDNIGHT, at, eventually, terminal_job, until

CASES = [
    pytest.param("prune", {"prune_schedule_utc": "05:00"}, at("05:00"), id="prune-daily"),
    pytest.param(
        "prune",
        {"prune_schedule_utc": "05:00", "prune_cron_expr": "30 1 * * *"},
        at("01:30"),
        id="prune-cron-wins",
    ),
    pytest.param(
        "archive_expiry",
        {"archive_expiry_schedule_utc": "06:15"},
        at("06:15"),
        id="archive-expiry-daily",
    ),
    pytest.param(
        "archive_expiry",
        {"archive_expiry_schedule_utc": "06:15", "archive_expiry_cron_expr": "45 0 * * *"},
        at("00:45"),
        id="archive-expiry-cron-wins",
    ),
]


def planned(logs: list[MutableMapping[str, Any]], loop: str) -> list[str]:
    return [e["next_fire"] for e in logs if e["event"] == "sweep_planned" and e["loop"] == loop]


@pytest.mark.parametrize(("loop", "settings", "fire"), CASES)
async def test_a_sweep_runs_at_the_time_its_settings_name(
    make_worker: Callable[..., Worker], loop: str, settings: dict[str, str], fire: datetime
) -> None:
    # The expiry's job is archived before midnight, to expire at 23:41: its day has ended
    # when the worker starts at 00:10, so the expiry's run (and nothing earlier) removes it.
    expiry = loop == "archive_expiry"
    clock = FakeClock(MIDNIGHT - timedelta(minutes=30) if expiry else MIDNIGHT)
    backend = InMemoryBackend(clock=clock)
    job = await terminal_job(backend, clock, JobStatus.SUCCEEDED)
    clock.advance(timedelta(minutes=10))
    if expiry:
        policy = PrunePolicy({JobStatus.SUCCEEDED: timedelta(minutes=1)}, timedelta(minutes=1))
        assert (await backend.prune_jobs(policy)).total == 1
        clock.advance(MIDNIGHT + timedelta(minutes=10) - clock.now())

    async def swept() -> bool:
        if loop == "prune":
            return await backend.get(job.id) is None
        return any(e["event"] == "archive_expiry_ran" for e in logs)

    # The watchdog is off and the lease (the leader's too) outlasts a day: this test moves
    # the clock by hours in one step, which a real leader would take for a freeze.
    worker = make_worker(
        backend, [], clock=clock, until_idle=False, watchdog_enabled=False,
        prune_retention_period="1m", lock_lease=2 * 86400, **settings,
    )  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        running = asyncio.create_task(worker.run())
        await until(lambda: bool(planned(logs, loop)))
        assert planned(logs, loop) == [fire.isoformat()]
        assert not await swept()
        clock.advance(fire - clock.now())
        await eventually(swept)
        await until(lambda: len(planned(logs, loop)) == 2)  # the next fire, after the run
        worker.stop()
        assert await asyncio.wait_for(running, 20) == 0
    if loop == "prune":
        archived = await backend.get_archived_job(job.id)
        assert archived is not None and archived.archived_at == fire
        assert [e["total"] for e in logs if e["event"] == "prune_ran"] == [1]
    else:
        assert [e["deleted"] for e in logs if e["event"] == "archive_expiry_ran"] == [1]
    assert planned(logs, loop)[1] == (fire + timedelta(days=1)).isoformat()
