"""A schedule made with `taskq schedules add` fires in a real `taskq worker`: once its fire
time is due the leader makes its job, the worker runs it, and the job names the schedule and
its fire time (a minute boundary). The test plans the first fire at the minute boundary just
past instead of waiting up to 60 s for the next one; when a cron fire is due is the cron
rules' tests' (tests/unit/test_schedule_fire.py, tests/conformance/test_schedules.py)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import JobFilter, JobRow
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.test_worker_cli import FAST_ENV, ROOT, worker_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

FIRE_TIMEOUT = 60.0  # the leader's first cron tick and the run


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def due_now(pg: PgTarget, name: str) -> None:
    """Plan the schedule's next fire at the minute boundary just past: due at once."""
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"UPDATE {pg.schema}.schedules SET next_fire_at = date_trunc('minute', now()) "
            "WHERE name = $1",
            name,
        )
    finally:
        await conn.close()


async def _first_finished_job(backend: PostgresBackend, actor: str) -> JobRow:
    """The first job of ``actor`` to reach a terminal state (polled; the timeout is the
    caller's)."""
    while True:
        jobs = await backend.list_jobs(JobFilter(actor=actor, limit=None))
        finished = [job for job in jobs if job.is_terminal]
        if finished:
            return finished[0]
        await asyncio.sleep(0.2)


async def test_an_every_minute_schedule_runs_in_a_real_worker(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    env = pg.env(**FAST_ENV)
    added = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "schedules", "add", "every-minute", "echo", "* * * * *",
        "--payload", '{"from": "cron"}',
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(added.communicate(), 60)
    assert added.returncode == 0, err.decode()
    await due_now(pg, "every-minute")
    worker = await asyncio.create_subprocess_exec(
        *worker_cmd(), cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    try:
        job = await asyncio.wait_for(_first_finished_job(backend, "echo"), FIRE_TIMEOUT)
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 30)
    assert worker.returncode == 0
    assert job.status is JobStatus.SUCCEEDED and job.result == {"from": "cron"}
    assert job.metadata["schedule"] == "every-minute"
    fire_time = datetime.fromisoformat(job.metadata["fire_time"])
    assert (fire_time.second, fire_time.microsecond) == (0, 0)  # a minute boundary
    record = await backend.get_schedule("every-minute")
    assert record is not None and record.last_job_id == job.id
    assert record.last_fired_at is not None and record.next_fire_at is not None
    assert record.next_fire_at > fire_time
