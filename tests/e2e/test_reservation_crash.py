"""A worker killed with SIGKILL while its job holds a reservation slot: the slot stays held
until its lease runs out (nothing renews it), then the surviving fleet frees it (the
leaked-slot sweep, or the lapsed lease itself) and the jobs waiting for the slot run; the
crashed job runs again."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.ratelimit_actors:registry"
ENV = {
    "TASKQ_IDLE_SETTLE_WINDOW": "0.3",
    "TASKQ_IDLE_POLL_INTERVAL": "0.1",
    "TASKQ_HEARTBEAT_INTERVAL": "0.5",
    "TASKQ_LOCK_LEASE": "3",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "1",
    "TASKQ_CLEANUP_GRACE_PERIOD": "1",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_SWEEP_INTERVAL": "0.5",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_LEVEL": "WARNING",
}


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def test_a_killed_workers_slot_lapses_and_the_waiting_jobs_run(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    holder = await backend.enqueue(EnqueueArgs("hold_slot", {"seconds": 60}))
    victim = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, cwd=ROOT, env=pg.env(**ENV),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Killed once it holds the slot and its start is recorded (a job killed before its
        # start mark runs again as the same attempt, by design).
        async with asyncio.timeout(30):
            while not (
                await backend.list_held_reservation_slots("e2e_solo")
                and await _started(backend, holder.id)
            ):
                await asyncio.sleep(0.05)
    finally:
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
    [slot] = await backend.list_held_reservation_slots("e2e_solo")
    assert slot.job_id == holder.id  # still held: a SIGKILLed worker releases nothing

    waiting = [await backend.enqueue(EnqueueArgs("use_slot", {"n": n})) for n in range(3)]
    survivor = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, "--until-idle", cwd=ROOT, env=pg.env(**ENV),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(survivor.communicate(), 90)
    assert survivor.returncode == 0, err.decode()
    for job in waiting:
        row = await backend.get(job.id)
        assert row is not None and row.status is JobStatus.SUCCEEDED
        assert row.started_at is not None and row.started_at >= slot.lease_expires_at
    # It ran again: its crash used one attempt of its budget, its run another. A claim of it
    # that met its own leaked slot still held was given back unstarted, under a number of its
    # own that uses no budget (so the run's number may be 3).
    again = await backend.get(holder.id)
    assert again is not None and again.status is JobStatus.SUCCEEDED
    assert (again.result, again.attempts_used) == (again.attempt, 2)
    assert await backend.list_held_reservation_slots() == []


async def _started(backend: PostgresBackend, job_id: UUID) -> bool:
    row = await backend.get(job_id)
    return row is not None and row.started_at is not None
