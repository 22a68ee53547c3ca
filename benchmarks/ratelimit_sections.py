"""Rate-limit benchmark: a TokenBucket of 100/s over 4 `taskq worker` processes.

Two figures. The limit: 4 workers work through a backlog of limited jobs (more than the whole
section admits); the starts counted within the minute after the first, on the server's clock,
against 100/s (the bucket's burst of 100 adds 1.7% over a minute). The neighbours: the time 4
workers take to drain a batch of unlimited jobs, alone (a schema of their own) and beside that
limited backlog as it keeps cycling (its jobs claimed, admitted or denied and sent back paced).

A 2-core machine shared with the database drifts by a fifth over minutes, so the two sides
alternate, ROUNDS times, and the medians count. Each round starts a fleet on its side's
schema, lets it settle (the limited jobs that came due while no fleet ran claimed, and the
leader's vacuum of what the previous round left behind: the first pass over a fresh backlog,
or over the jobs due after a pause, claims and denies each once), drains the batch and stops
the fleet.

The queue is FIFO: a batch of unlimited jobs enqueued at once goes before the limited jobs that
come back after it, so the limited actor mostly waits during the drain, and what the
neighbours pay is the backlog beside them (its promotions, the claims and denials of the jobs
due before the batch), not a share of the bucket's rate.
"""

from __future__ import annotations

import asyncio
import statistics
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
VACUUM_WAIT = 30.0  # at most this long for the leader's vacuum after a drain
ROUNDS = 5  # drains of the unlimited batch on each side, alternating; the medians count


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


async def _drained(backend: PostgresBackend, actor: str, round_: int, count: int) -> float:
    """Wait until no job of ``actor`` is pending or running, then check that the ``count``
    enqueued in ``round_`` succeeded; the seconds from the first start to the last finish, on
    the server's clock (the workers' start-up is not counted). The wait reads two partial
    indexes (cheap on either side: a count over the jobs table, polled, cost the server more
    beside the backlog's larger table than alone, and so measured itself)."""
    jobs = f"{backend.schema}.jobs"
    while True:
        async with backend.transaction() as conn:
            busy = await conn.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM {jobs} WHERE status = 'pending' AND actor = $1)"
                f" OR EXISTS (SELECT 1 FROM {jobs} WHERE status = 'running' AND actor = $1)",
                actor,
            )
        if not busy:
            break
        await asyncio.sleep(0.1)
    async with backend.transaction() as conn:
        row = await conn.fetchrow(
            f"SELECT count(*) AS done, min(started_at) AS first, max(finished_at) AS last"
            f" FROM {jobs} WHERE actor = $1 AND status = 'succeeded' AND payload->>'round' = $2",
            actor,
            str(round_),
        )
    if row["done"] != count:
        raise RuntimeError(f"{row['done']} of {count} {actor} jobs of round {round_} succeeded")
    return float((row["last"] - row["first"]).total_seconds())


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


async def _vacuumed_since(backend: PostgresBackend, vacuums: int) -> None:
    """Until the jobs table was vacuumed once more than ``vacuums`` (at most VACUUM_WAIT)."""
    deadline = asyncio.get_running_loop().time() + VACUUM_WAIT
    while await _vacuums(backend) <= vacuums and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)


async def _load(backend: PostgresBackend, actor: str, count: int, round_: int = 0) -> None:
    """``count`` jobs of ``actor`` at once (one COPY), analyzed in the same transaction, as
    the other sections settle a bulk load: without it the workers' statements keep plans made
    for the table as it was before the load (empty, in the first phase) until autovacuum comes
    by. Analyzed before the commit, so no ANALYZE runs beside the drain (it took longer on the
    backlog's larger table)."""
    items = [EnqueueArgs(actor, {"n": n, "round": str(round_)}) for n in range(count)]
    async with backend.transaction() as conn:
        await backend.enqueue_batch_fast(items, connection=conn)
        await conn.execute(f"ANALYZE {backend.schema}.jobs")


async def _settled(backend: PostgresBackend) -> None:
    """Until the limited jobs that came due while no fleet ran were claimed (and denied or
    admitted), and the leader's vacuum cleared what that and the previous round left."""
    waiting = JobFilter(actor="limited_call", status=JobStatus.PENDING, limit=None)
    while await backend.count_jobs(waiting) > 2 * RATE:
        await asyncio.sleep(0.1)
    await _vacuumed_since(backend, await _vacuums(backend))


async def _round(backend: PostgresBackend, dsn: str, count: int, round_: int) -> float:
    """One drain of ``count`` unlimited jobs by a fleet started for it; its seconds."""
    async with fleet(dsn, backend.schema):
        await _warm(backend)
        await _settled(backend)
        await _load(backend, "free_call", count, round_)
        return await _drained(backend, "free_call", round_, count)


async def _limit_window(backend: PostgresBackend, dsn: str, window: float) -> list[datetime]:
    """The limited starts, once they span ``window`` seconds and one more."""
    async with fleet(dsn, backend.schema):
        await _warm(backend)
        while True:
            starts = await _starts(backend, "limited_call")
            if starts and (starts[-1] - starts[0]).total_seconds() >= window + 1:
                return starts
            await asyncio.sleep(0.5)


async def measure(
    fresh: Callable[[], AbstractAsyncContextManager[PostgresBackend]],
    dsn: str,
    *,
    unlimited: int,
    window: float,
    rounds: int = ROUNDS,
) -> LimitFigures:
    """Both figures: the alone side on one fresh schema, the limit and the beside side on
    another (``fresh``: Bench.fresh_backend)."""
    async with fresh() as alone, fresh() as beside:
        # More than the window and every round after it admit: the limit binds throughout.
        await _load(beside, "limited_call", int(RATE * (window + 60 * rounds)))
        starts = await _limit_window(beside, dsn, window)
        alone_seconds, beside_seconds = [], []
        for round_ in range(rounds):
            alone_seconds.append(await _round(alone, dsn, unlimited, round_))
            beside_seconds.append(await _round(beside, dsn, unlimited, round_))
    first = starts[0]
    inside = [s for s in starts if s - first < timedelta(seconds=window)]
    return LimitFigures(
        window,
        len(inside),
        _peak(inside, timedelta(seconds=1)),
        unlimited,
        statistics.median(alone_seconds),
        statistics.median(beside_seconds),
    )
