"""`taskq worker` as a real process on a real PostgreSQL: until-idle, exit codes, NOTIFY."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.e2e_actors:registry"
FAST_ENV = {
    "TASKQ_IDLE_SETTLE_WINDOW": "0.3",
    "TASKQ_IDLE_POLL_INTERVAL": "0.1",
    "TASKQ_HEARTBEAT_INTERVAL": "0.5",
    "TASKQ_LOCK_LEASE": "5",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "1",
    "TASKQ_CLEANUP_GRACE_PERIOD": "1",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_LEVEL": "WARNING",
}


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


def worker_cmd(*extra: str, actors: str = ACTORS) -> list[str]:
    return [TASKQ_BIN, "worker", "--actors", actors, *extra]


async def run_worker(
    pg: PgTarget,
    *extra: str,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    env = pg.env(**FAST_ENV, **(extra_env or {}))
    proc = await asyncio.create_subprocess_exec(
        *worker_cmd(*extra, **kw), cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return subprocess.CompletedProcess([], proc.returncode, out.decode(), err.decode())


async def test_until_idle_drains_500_jobs_and_exits_0(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    await backend.enqueue_batch([EnqueueArgs("echo", {"n": i}) for i in range(500)])
    result = await run_worker(pg, "--until-idle", "--concurrency", "16")
    assert result.returncode == 0, result.stderr
    jobs = await backend.list_jobs(JobFilter(limit=None))
    assert len(jobs) == 500
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    assert sorted(j.result["n"] for j in jobs) == list(range(500))


async def test_a_job_failing_for_good_exits_3(pg: PgTarget, backend: PostgresBackend) -> None:
    await backend.enqueue(EnqueueArgs("echo", {}))
    failing = await backend.enqueue(EnqueueArgs("explode", {}))
    result = await run_worker(pg, "--until-idle")
    assert result.returncode == 3, result.stderr
    job = await backend.get(failing.id)
    assert job is not None and job.status is JobStatus.FAILED and job.error_class == "RuntimeError"


async def test_idle_max_runtime_exits_4(pg: PgTarget, backend: PostgresBackend) -> None:
    from datetime import timedelta

    await backend.enqueue(EnqueueArgs("echo", {}, delay=timedelta(hours=1)))
    result = await run_worker(pg, "--until-idle", "--idle-max-runtime", "1s")
    assert result.returncode == 4, result.stderr


async def test_max_concurrent_one_never_overlaps_across_two_workers(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    await backend.enqueue_batch([EnqueueArgs("exclusive", {"i": i}) for i in range(40)])
    results = await asyncio.gather(
        run_worker(pg, "--until-idle", "--concurrency", "8"),
        run_worker(pg, "--until-idle", "--concurrency", "8"),
    )
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    runs = sorted(
        (j.result["start"], j.result["end"]) for j in await backend.list_jobs(JobFilter(limit=None))
    )
    assert len(runs) == 40
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert start >= end, "two exclusive jobs ran at the same time"


async def test_round_robin_interleaves_fairness_keys(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    await backend.update_queue("fair", mode="round_robin")
    await backend.enqueue_batch(
        [EnqueueArgs("fair", {"k": "big"}, queue="fair", fairness_key="big") for _ in range(20)]
        + [
            EnqueueArgs("fair", {"k": "small"}, queue="fair", fairness_key="small")
            for _ in range(3)
        ]
    )
    # One job at a time and no prefetch: every claim is a separate round-robin decision.
    result = await run_worker(
        pg, "--until-idle", "--concurrency", "1", "--queues", "fair",
        extra_env={"TASKQ_PREFETCH": "0"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    jobs = sorted(await backend.list_jobs(JobFilter(limit=None)), key=lambda j: j.result["start"])
    first_six = [j.payload["k"] for j in jobs[:6]]
    assert first_six.count("small") == 3, first_six


async def test_scheduled_job_runs_when_due(pg: PgTarget, backend: PostgresBackend) -> None:
    from datetime import timedelta

    row = await backend.enqueue(EnqueueArgs("stamp", {}, delay=timedelta(seconds=1)))
    result = await run_worker(pg, "--until-idle")
    assert result.returncode == 0, result.stderr
    job = await backend.get(row.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.result["start"] >= job.created_at.timestamp() + 0.9


async def test_a_fresh_job_starts_before_the_poll_interval(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    env = pg.env(**FAST_ENV, TASKQ_NOTIFY_POLL_INTERVAL="30", TASKQ_POLL_INTERVAL="30")
    proc = await asyncio.create_subprocess_exec(
        *worker_cmd(), cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    try:
        await _wait_for_worker_row(backend)
        await asyncio.sleep(0.5)  # let the producer reach its idle wait
        enqueued_at = time.time()
        row = await backend.enqueue(EnqueueArgs("stamp", {}))
        job = await _wait_terminal(backend, row.id, timeout=10)
        assert job.status is JobStatus.SUCCEEDED
        assert job.result["start"] - enqueued_at < 2.0  # NOTIFY, not the 30 s poll
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


async def _wait_for_worker_row(backend: PostgresBackend) -> None:
    for _ in range(200):
        if await backend.list_workers():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("worker never registered")


async def _wait_terminal(backend: PostgresBackend, job_id: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = await backend.get(job_id)
        if job is not None and job.is_terminal:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError("job did not finish")


async def test_structural_drift_refuses_start_until_forced(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    first = await run_worker(pg, "--until-idle")
    assert first.returncode == 0, first.stderr
    refused = await run_worker(pg, "--until-idle", actors="tests.e2e.e2e_actors:moved")
    assert refused.returncode == 1
    assert refused.stderr.strip().count("\n") == 0
    assert "echo.queue" in refused.stderr and "--force-update-actor-config" in refused.stderr
    forced = await run_worker(
        pg, "--until-idle", "--force-update-actor-config", actors="tests.e2e.e2e_actors:moved"
    )
    assert forced.returncode == 0, forced.stderr
    config = await backend.get_actor_config("echo")
    assert config is not None and config.queue == "elsewhere"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.e2e.e2e_actors:not_a_registry", "generator"),
        ("tests.e2e.e2e_actors:nothing", "no attribute"),
        ("no_such_module_abc:registry", "cannot import"),
        ("missing-colon", "MODULE:ATTRIBUTE"),
    ],
)
async def test_bad_actors_values_are_one_line_exit_1(pg: PgTarget, spec: str, message: str) -> None:
    result = await run_worker(pg, "--until-idle", actors=spec)
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
