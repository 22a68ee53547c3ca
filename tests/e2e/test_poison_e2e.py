"""A job that SIGKILLs every worker running it: after TASKQ_POISON_RECLAIMS crashes the
leader fails it as a poison job, and the rest of its queue drains. Real `taskq worker`
processes, started one after another as a supervisor would restart them."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.poison_actors:registry"
POISON_RECLAIMS = 3
ENV = {
    "TASKQ_HEARTBEAT_INTERVAL": "0.25",
    "TASKQ_LOCK_LEASE": "1",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "0.2",
    "TASKQ_CLEANUP_GRACE_PERIOD": "0.2",
    "TASKQ_TERMINATION_GRACE_PERIOD": "10",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_SWEEP_INTERVAL": "0.2",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_POISON_RECLAIMS": str(POISON_RECLAIMS),
}
HARMLESS = 20


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def run_worker(pg: PgTarget) -> int:
    """One `taskq worker --until-idle` (one job at a time) to its end; its return code."""
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, "--queues", "poison", "--concurrency", "1",
        "--until-idle", cwd=ROOT, env=pg.env(**ENV),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        return await asyncio.wait_for(proc.wait(), timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def drain_with_restarts(
    pg: PgTarget, backend: PostgresBackend, most: int, actor: str = "take_down_worker"
) -> tuple[JobRow, list[int]]:
    """Enqueue the poison job (of ``actor``) and the harmless ones, then start workers one
    after another (at most ``most``) until the queue has nothing left; the poison job and the
    exit codes."""
    poison = await backend.enqueue(
        EnqueueArgs(actor, {}, queue="poison", priority=100, max_attempts=20)
    )
    for n in range(HARMLESS):
        await backend.enqueue(EnqueueArgs("harmless", {"n": n}, queue="poison"))
    codes: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(codes) < most:
        codes.append(await run_worker(pg))
        if not await backend.has_active_jobs(["poison"]):
            break
    return poison, codes


async def assert_poisoned_and_drained(
    backend: PostgresBackend, poison: JobRow, codes: list[int], deaths: int
) -> None:
    assert codes.count(-signal.SIGKILL) == deaths, codes
    # The last worker drained the rest cleanly: the poison job was failed by the leader's
    # sweep, not by a job this worker ran.
    assert len(codes) == deaths + 1 and codes[-1] == 0, codes
    row = await backend.get(poison.id)
    assert row is not None and row.status is JobStatus.FAILED, row
    assert row.error_class == "PoisonJob"
    assert row.error_message == (
        f"{POISON_RECLAIMS} workers died running it (TASKQ_POISON_RECLAIMS is "
        f"{POISON_RECLAIMS}); not handed out again"
    )
    crashed = [a for a in await backend.get_attempts(poison.id) if a.outcome == "crashed"]
    assert len(crashed) == POISON_RECLAIMS
    harmless = await backend.list_jobs(JobFilter(actor="harmless", limit=None))
    assert len(harmless) == HARMLESS
    assert {job.status for job in harmless} == {JobStatus.SUCCEEDED}
    reclaims = await backend.poll_reclaim_events(0, visibility_delay=timedelta(0))
    mine = [e for e in reclaims if e.job_id == poison.id]
    assert len(mine) == deaths
    assert mine[-1].detail["poison"] is True and mine[-1].detail["crashes"] == POISON_RECLAIMS


async def test_a_job_that_kills_its_workers_mid_body_is_failed_as_poison_and_the_queue_drains(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    poison, codes = await drain_with_restarts(pg, backend, POISON_RECLAIMS + 3)
    await assert_poisoned_and_drained(backend, poison, codes, POISON_RECLAIMS)


async def test_a_job_that_kills_its_workers_at_its_first_line_is_failed_as_poison_too(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    # Its first run dies before the batched start mark goes out: that reclaim gives it back
    # unstarted (no crash). Its next worker writes the start before the body runs, so each
    # death from then on counts: one more death than the limit, not 10 + max_attempts.
    poison, codes = await drain_with_restarts(pg, backend, POISON_RECLAIMS + 4, "kill_at_once")
    await assert_poisoned_and_drained(backend, poison, codes, POISON_RECLAIMS + 1)
    reclaims = await backend.poll_reclaim_events(0, visibility_delay=timedelta(0))
    started = [e.detail["started"] for e in reclaims if e.job_id == poison.id]
    assert started == [False] + [True] * POISON_RECLAIMS
    row = await backend.get(poison.id)
    assert row is not None and row.unstarted_reclaims == 1
