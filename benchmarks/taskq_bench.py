"""TaskQ as a contender of the peer harness (``../shared/bench-peers``): `make bench-peers`.

A: ``JobsClient.enqueue_many_fast`` -> one COPY per chunk.
B: ``Worker(...).run()`` in the harness's worker process, concurrency C, default settings
   (prefetch = C, batched completions, LISTEN/NOTIFY).
C: ``JobsClient.enqueue`` one job at a time; the idle worker is woken by NOTIFY.
"""

from __future__ import annotations

import os
from typing import Any

import asyncpg
import common  # type: ignore[import-not-found]  # the harness module, on PYTHONPATH

from taskq_core import JobsClient, actor
from taskq_core.actors import build_registry
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.settings import TaskqSettings
from taskq_core.worker.runtime import Worker, _package_version

SCHEMA = "taskq"
BULK_CHUNK = int(os.environ.get("TASKQ_BENCH_CHUNK", "10000"))


@actor
async def noop(payload: dict[str, Any]) -> None:
    """The harness's no-op job: reports its enqueue time (if any) to the harness."""
    common.on_job(payload.get("t"))


class TaskqBench(common.Adapter):  # type: ignore[misc]
    name = "taskq"
    version = _package_version() or "dev"
    unfinished_sql = (
        f"SELECT count(*) FROM {SCHEMA}.jobs WHERE status IN ('pending', 'scheduled', 'running')"
    )
    notes = f"bulk chunk {BULK_CHUNK}"

    async def install(self, dsn: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate_up(conn, SCHEMA)
        finally:
            await conn.close()

    async def open_producer(self, dsn: str) -> None:
        self.backend = await PostgresBackend.connect(dsn, SCHEMA, max_size=2)
        self.client = JobsClient(backend=self.backend)
        await self.client.open()

    async def close_producer(self) -> None:
        await self.backend.close()

    async def enqueue_bulk(self, n: int) -> None:
        for start in range(0, n, BULK_CHUNK):
            size = min(BULK_CHUNK, n - start)
            await self.client.enqueue_many_fast([(noop, {})] * size)

    async def enqueue_one(self, t: float) -> None:
        await self.client.enqueue(noop, {"t": t})

    async def run_worker(self, dsn: str, concurrency: int) -> None:
        settings = TaskqSettings.load(
            pg_dsn=dsn,
            schema_name=SCHEMA,
            max_concurrency=concurrency,
            health_enabled=False,
            log_level="WARNING",
        )
        registry = build_registry([noop])
        await Worker(settings, registry, install_signal_handlers=False).run()


if __name__ == "__main__":
    common.main(TaskqBench)
