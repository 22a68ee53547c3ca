"""Split DSNs: a worker's drain and single enqueues with the pooled DSN direct, on the server
without a statement cache, and through a real PgBouncer in transaction mode, side by side.

Three ways to reach one server, measured in alternating rounds (best of each):

- ``direct``: one DSN; every pool keeps asyncpg's prepared statements.
- ``split, no PgBouncer``: the pooled DSN names the same server by another spelling, so the
  general pool runs as it would through PgBouncer (no statement cache, no session settings)
  without the extra hop: what the missing prepared statements cost alone.
- ``through PgBouncer``: the pooled DSN is PgBouncer's (``chaos/pgbouncer.py``).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.worker_sections import worker_process
from chaos.pgbouncer import PgBouncer
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs

CONCURRENCY = 16
ENQUEUE_TRIES = 3  # per variant and round
VARIANTS = ("direct", "split, no PgBouncer", "through PgBouncer")

FreshBackend = Callable[[], AbstractAsyncContextManager[PostgresBackend]]
Settle = Callable[[PostgresBackend], Awaitable[None]]


@dataclass
class PoolerFigures:
    """Best seconds per variant for the drain and for the single enqueues."""

    jobs: int
    enqueues: int
    drain: dict[str, float] = field(default_factory=dict)
    enqueue: dict[str, float] = field(default_factory=dict)
    exit_codes: set[int] = field(default_factory=set)


def same_server_other_spelling(dsn: str) -> str:
    """``dsn`` with a parameter that changes nothing (sslmode=prefer is asyncpg's default),
    so the backend sees a pooled DSN other than the direct one."""
    return dsn + ("&" if "?" in dsn else "?") + "sslmode=prefer"


async def _drain(
    fresh: FreshBackend, settle: Settle, dsn: str, pooled: str | None, jobs: int
) -> tuple[float, int]:
    """Seconds for one worker process (pooled DSN ``pooled``) to drain ``jobs`` no-ops."""
    async with fresh() as backend:
        await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(jobs)])
        await settle(backend)
        extra = {} if pooled is None else {"TASKQ_PG_DSN_POOLED": pooled}
        started = time.perf_counter()
        async with worker_process(
            dsn, backend.schema, "--concurrency", str(CONCURRENCY), "--until-idle", extra_env=extra
        ) as proc:
            code = await proc.wait()
        return time.perf_counter() - started, code


async def _enqueues(fresh: FreshBackend, dsn: str, pooled: str | None, count: int) -> float:
    """Seconds for ``count`` single enqueues, one after another, through a client's backend."""
    async with fresh() as schema_owner:
        backend = await PostgresBackend.connect(
            pooled or dsn, schema_owner.schema, direct_dsn=dsn, max_size=2
        )
        try:
            started = time.perf_counter()
            for n in range(count):
                await backend.enqueue(EnqueueArgs("noop", {"n": n}))
            return time.perf_counter() - started
        finally:
            await backend.close()


@asynccontextmanager
async def _bouncer(dsn: str) -> AsyncIterator[PgBouncer]:
    bouncer = PgBouncer(dsn, Path(tempfile.mkdtemp(prefix="taskq-bench-pgbouncer-")))
    await asyncio.to_thread(bouncer.start)
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.root, ignore_errors=True)


async def measure(
    fresh: FreshBackend, settle: Settle, dsn: str, jobs: int, enqueues: int, rounds: int
) -> PoolerFigures:
    """Each variant's best drain and enqueue time over ``rounds`` alternating rounds (the
    enqueues ``ENQUEUE_TRIES`` times in each)."""
    figures = PoolerFigures(jobs, enqueues)
    async with _bouncer(dsn) as bouncer:
        pooled = {
            "direct": None,
            "split, no PgBouncer": same_server_other_spelling(dsn),
            "through PgBouncer": bouncer.dsn(),
        }
        for _ in range(rounds):
            for variant in VARIANTS:
                seconds, code = await _drain(fresh, settle, dsn, pooled[variant], jobs)
                figures.exit_codes.add(code)
                figures.drain[variant] = min(figures.drain.get(variant, seconds), seconds)
                for _ in range(ENQUEUE_TRIES):  # cheap, and noisier than the drain
                    seconds = await _enqueues(fresh, dsn, pooled[variant], enqueues)
                    figures.enqueue[variant] = min(figures.enqueue.get(variant, seconds), seconds)
    return figures
