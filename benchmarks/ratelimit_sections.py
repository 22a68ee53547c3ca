"""Rate-limit benchmark: a TokenBucket of 100/s over 4 `taskq worker` processes.

Two figures. The limit: 4 workers drain a backlog of limited jobs (more than the window can
admit) for a minute; the starts counted within the minute after the first, on the server's
clock, against 100/s (the bucket's burst of 100 adds 1.7% over a minute). The neighbours: the
time 4 workers take to drain a batch of unlimited jobs enqueued once the fleet is warm, alone
and then while that limited backlog cycles (its jobs claimed, denied and sent back paced),
once its first pass is over and the leader's vacuum has cleared what it left (every job of a
fresh backlog is claimed and denied once: a one-time cost of two row versions per job, not
what the neighbours pay while the limit holds).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from benchmarks.worker_sections import worker_process
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus

ACTORS = "benchmarks.ratelimit_actors:registry"
RATE = 100.0
WORKERS = 4
WARM_UP = 3.0  # seconds between the fleet's start and the unlimited jobs' enqueue
VACUUM_WAIT = 60.0  # at most this long for the leader's vacuum after the backlog's first pass


@dataclass(frozen=True)
class LimitFigures:
    """What the rate-limit section measured."""

    window: float  # seconds the limited starts were counted over
    limited_starts: int
    peak_second: int  # most limited starts within any one second
    unlimited_jobs: int
    unlimited_alone: float  # seconds to drain them alone
    unlimited_beside: float  # ... beside the limited backlog

    @property
    def limited_rate(self) -> float:
        return self.limited_starts / self.window

    @property
    def unlimited_kept(self) -> float:
        """The unlimited drain rate beside the limit, as a share of the rate alone."""
        return self.unlimited_alone / self.unlimited_beside


@asynccontextmanager
async def fleet(dsn: str, schema: str) -> AsyncIterator[None]:
    """``WORKERS`` worker processes on the schema, stopped on exit."""
    async with AsyncExitStack() as stack:
        for _ in range(WORKERS):
            await stack.enter_async_context(
                worker_process(dsn, schema, "--concurrency", "8", actors=ACTORS)
            )
        yield


async def _drained(backend: PostgresBackend, actor: str, count: int) -> float:
    """Wait until ``count`` jobs of ``actor`` succeeded; the seconds from the first start to
    the last finish, on the server's clock (the workers' start-up is not counted)."""
    done = JobFilter(actor=actor, status=JobStatus.SUCCEEDED, limit=None)
    while await backend.count_jobs(done) < count:
        await asyncio.sleep(0.05)
    rows = await backend.list_jobs(done)
    first = min(row.started_at for row in rows if row.started_at is not None)
    last = max(row.finished_at for row in rows if row.finished_at is not None)
    return (last - first).total_seconds()


async def _starts(backend: PostgresBackend, actor: str) -> list[datetime]:
    rows = await backend.list_jobs(JobFilter(actor=actor, limit=None))
    return sorted(row.started_at for row in rows if row.started_at is not None)


def _peak(starts: list[datetime], span: timedelta) -> int:
    """Most starts within any ``span`` (two pointers over the sorted times)."""
    best, low = 0, 0
    for high, moment in enumerate(starts):
        while moment - starts[low] >= span:
            low += 1
        best = max(best, high - low + 1)
    return best


async def _warm(backend: PostgresBackend) -> None:
    """Until every worker of the fleet registered, and a while after (the start-up settles)."""
    while len(await backend.list_workers()) < WORKERS:
        await asyncio.sleep(0.05)
    await asyncio.sleep(WARM_UP)


async def _vacuums(backend: PostgresBackend) -> int:
    """How many times the jobs table was vacuumed (by hand, by the leader or by autovacuum)."""
    async with backend.transaction() as conn:
        count = await conn.fetchval(
            "SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables"
            " WHERE relid = $1::regclass",
            f"{backend.schema}.jobs",
        )
    return int(count or 0)


async def _load(backend: PostgresBackend, actor: str, count: int) -> None:
    """``count`` jobs of ``actor`` at once (one COPY), then ANALYZE, as the other sections
    settle a bulk load: without it the workers' statements keep plans made for the table
    as it was before the load (empty, in the first phase) until autovacuum comes by."""
    await backend.enqueue_batch_fast([EnqueueArgs(actor, {"n": n}) for n in range(count)])
    async with backend.transaction() as conn:
        await conn.execute(f"ANALYZE {backend.schema}.jobs")


async def _unlimited_drain(backend: PostgresBackend, count: int) -> float:
    """Enqueue ``count`` unlimited jobs at once and time their drain."""
    await _load(backend, "free_call", count)
    return await _drained(backend, "free_call", count)


async def unlimited_alone(backend: PostgresBackend, dsn: str, count: int) -> float:
    """Seconds the fleet takes to drain ``count`` unlimited jobs with nothing else queued."""
    async with fleet(dsn, backend.schema):
        await _warm(backend)
        return await _unlimited_drain(backend, count)


async def beside_the_limit(
    backend: PostgresBackend, dsn: str, unlimited: int, window: float
) -> tuple[float, int, int]:
    """(seconds to drain the unlimited jobs while the limited backlog cycles, limited starts
    within ``window`` of the first, most limited starts in one second)."""
    backlog = int(RATE * window * 1.5)  # more than the window admits: the limit binds throughout
    await _load(backend, "limited_call", backlog)
    async with fleet(dsn, backend.schema):
        await _warm(backend)
        # The first pass over the backlog claims and denies every job once (a write each):
        # the unlimited jobs are timed after it, beside the backlog coming back paced.
        vacuums = await _vacuums(backend)
        waiting = JobFilter(actor="limited_call", status=JobStatus.PENDING, limit=None)
        while await backend.count_jobs(waiting) > 2 * RATE:
            await asyncio.sleep(0.1)
        # The pass leaves two dead row versions per job in the hot indexes; the leader's own
        # vacuum (TASKQ_JOBS_VACUUM_ENABLED) clears them within seconds. The neighbours are
        # timed once it has, beside the steady stream of paced returns, not the one-time wake
        # of a fresh backlog.
        deadline = asyncio.get_running_loop().time() + VACUUM_WAIT
        while await _vacuums(backend) == vacuums and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
        seconds = await _unlimited_drain(backend, unlimited)
        while True:
            starts = await _starts(backend, "limited_call")
            if starts and (starts[-1] - starts[0]).total_seconds() >= window + 1:
                break
            await asyncio.sleep(0.5)
    first = starts[0]
    inside = [s for s in starts if s - first < timedelta(seconds=window)]
    return seconds, len(inside), _peak(inside, timedelta(seconds=1))


async def measure(
    fresh: Callable[[], AbstractAsyncContextManager[PostgresBackend]],
    dsn: str,
    *,
    unlimited: int,
    window: float,
) -> LimitFigures:
    """Both figures, each on a fresh schema (``fresh``: Bench.fresh_backend)."""
    async with fresh() as backend:
        alone = await unlimited_alone(backend, dsn, unlimited)
    async with fresh() as backend:
        beside, starts, peak = await beside_the_limit(backend, dsn, unlimited, window)
    return LimitFigures(window, starts, peak, unlimited, alone, beside)
