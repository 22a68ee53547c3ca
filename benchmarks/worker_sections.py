"""Worker benchmarks: a real `taskq worker` process draining a backlog, and the
enqueue->start latency of an idle worker (the same definitions as the peer harness)."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from benchmarks.worker_cpu import CpuUse, cpu_use
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter

ROOT = Path(__file__).resolve().parents[1]
TASKQ = str(Path(sys.executable).parent / "taskq")
ACTORS = "benchmarks.bench_actors:registry"


@dataclass(frozen=True)
class Latency:
    """Enqueue->start latency percentiles in milliseconds (p50, p95, p99).

    ``total`` counts from the enqueue call, as the peer harness does; ``commit`` is the
    enqueue's own INSERT + commit; ``after_commit`` the rest (NOTIFY, claim, start).
    """

    samples: int
    total: tuple[float, float, float]
    commit: tuple[float, float, float]
    after_commit: tuple[float, float, float]


def _percentiles(millis: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(millis, n=100)
    return cuts[49], cuts[94], cuts[98]


def worker_env(dsn: str, schema: str) -> dict[str, str]:
    """The environment of a benchmark worker: quiet, no health socket, instant idle exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(
        TASKQ_PG_DSN=dsn,
        TASKQ_SCHEMA_NAME=schema,
        TASKQ_HEALTH_ENABLED="false",
        TASKQ_LOG_LEVEL="WARNING",
        TASKQ_IDLE_SETTLE_WINDOW="0",
        TASKQ_IDLE_POLL_INTERVAL="0.05",
    )
    return env


@asynccontextmanager
async def worker_process(
    dsn: str,
    schema: str,
    *args: str,
    extra_env: dict[str, str] | None = None,
    actors: str = ACTORS,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A `taskq worker` child, stopped (SIGTERM) on exit if still running."""
    env = {**worker_env(dsn, schema), **(extra_env or {})}
    proc = await asyncio.create_subprocess_exec(
        TASKQ, "worker", "--actors", actors, *args,
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def drain(
    backend: PostgresBackend, dsn: str, jobs: int, concurrency: int
) -> tuple[float, int]:
    """Seconds for one worker process to finish ``jobs`` pre-enqueued no-op jobs."""
    await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(jobs)])
    seconds, code, _ = await timed_drain(backend, dsn, concurrency)
    return seconds, code


class Drained(NamedTuple):
    """A timed drain: its seconds, the worker's exit code, and the worker's CPU from its
    registration to the drain's end (None when it had exited by then)."""

    seconds: float
    exit_code: int
    cpu: CpuUse | None


async def timed_drain(
    backend: PostgresBackend,
    dsn: str,
    concurrency: int,
    done: Callable[[], Awaitable[bool]] | None = None,
) -> Drained:
    """Seconds from a worker process's start until the backlog is done (``done`` says so,
    when given; else no job waits or runs on ``default``); the worker's exit code and CPU."""
    done = done or await _backlog_done(backend)
    started = time.perf_counter()
    async with worker_process(
        dsn, backend.schema, "--concurrency", str(concurrency), "--until-idle"
    ) as proc:
        registered: CpuUse | None = None
        while not await done():
            if registered is None and await backend.list_workers():
                registered = cpu_use(proc.pid)
            await asyncio.sleep(0.02)
        seconds = time.perf_counter() - started
        ended = cpu_use(proc.pid)
        code = await proc.wait()
    cpu = None if registered is None or ended is None else ended.since(registered)
    return Drained(seconds, code, cpu)


async def _backlog_done(backend: PostgresBackend) -> Callable[[], Awaitable[bool]]:
    """A plain drain's watch: whether no job waits or runs on ``default``, asked once the
    newest job of the backlog (the last a FIFO drain claims) has ended, a read by primary
    key until then. It must cost the drain it times no more than a batch's or a workflow's
    watch does (the full question steps over the index entries of every job claimed so
    far)."""
    newest = await backend.list_jobs(JobFilter(limit=1))

    async def done() -> bool:
        if newest:
            row = await backend.get(newest[0].id)
            if row is not None and not row.is_terminal:
                return False
        return not await backend.has_active_jobs(["default"])

    return done


async def lateness(backend: PostgresBackend, dsn: str, samples: int) -> tuple[float, float, float]:
    """Scheduled jobs started on time: ``samples`` jobs enqueued in one batch with ``run_at``
    spread over the next 1-4 s, into an idle worker with the default 1 s promotion interval;
    percentiles (p50, p95, p99, ms) of each job's start past its run_at."""
    async with worker_process(dsn, backend.schema, "--concurrency", "16"):
        while not await backend.list_workers() or await backend.get_leader() is None:
            await asyncio.sleep(0.05)
        base = datetime.now(UTC) + timedelta(seconds=1)
        spread = [base + timedelta(seconds=3 * n / samples) for n in range(samples)]
        await backend.enqueue_batch_fast([EnqueueArgs("stamp", {}, run_at=at) for at in spread])
        while await backend.has_active_jobs(["default"]):
            await asyncio.sleep(0.05)
    rows = await backend.list_jobs(JobFilter(actor="stamp", limit=None))
    late = [(row.result - row.scheduled_at.timestamp()) * 1000 for row in rows]
    return _percentiles(late)


async def latency(backend: PostgresBackend, dsn: str, samples: int) -> Latency:
    """Enqueue jobs one at a time, 5 ms apart, into an idle worker; percentiles of start-enqueue."""
    async with worker_process(dsn, backend.schema, "--concurrency", "16"):
        while not await backend.list_workers():
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # let it settle into its idle wait
        sent: dict[object, tuple[float, float]] = {}
        for _ in range(samples):
            at = time.time()
            row = await backend.enqueue(EnqueueArgs("stamp", {}))
            sent[row.id] = (at, time.time())
            await asyncio.sleep(0.005)
        while await backend.has_active_jobs(["default"]):
            await asyncio.sleep(0.05)
    rows = await backend.list_jobs(JobFilter(actor="stamp", limit=None))
    timed = [(*sent[row.id], row.result) for row in rows if row.id in sent]
    return Latency(
        len(timed),
        total=_percentiles([(started - at) * 1000 for at, _, started in timed]),
        commit=_percentiles([(done - at) * 1000 for at, done, _ in timed]),
        after_commit=_percentiles([(started - done) * 1000 for _, done, started in timed]),
    )
