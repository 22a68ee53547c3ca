"""`make demo`: enqueue a few hundred jobs, drain them with a worker, print what happened.

Runs against TASKQ_PG_DSN (the Makefile sets ``embedded`` when nothing is configured): some
jobs succeed, some retry then succeed, some fail for good, some are scheduled seconds ahead.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter
from datetime import timedelta
from uuid import UUID

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from examples.actors import Charge, Flaky, Report, Resize, registry
from taskq_core import EnqueueItem, JobsClient, TaskqSettings
from taskq_core.actors import build_registry
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.connection import connect
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import JobFilter
from taskq_core.obs.logs import configure_logging
from taskq_core.worker.runtime import Worker

console = Console()


def _items() -> list[EnqueueItem]:
    rng = random.Random(42)
    items = [
        EnqueueItem(
            "resize", Resize(url=f"https://img.example/{i}.png", width=rng.choice([64, 128]))
        )
        for i in range(300)
    ]
    items += [EnqueueItem("flaky_upload", Flaky(succeed_on=rng.choice([2, 3]))) for _ in range(40)]
    items += [EnqueueItem("charge_card", Charge(amount_cents=100 * i)) for i in range(1, 11)]
    items += [
        EnqueueItem("build_report", Report(name=f"weekly-{i}"), delay=timedelta(seconds=2 + i % 3))
        for i in range(20)
    ]
    return items


async def _progress(backend: PostgresBackend, ids: list[UUID], done: asyncio.Event) -> None:
    columns = (
        TextColumn("[bold]draining"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("jobs", total=len(ids))
        while True:
            finished = await backend.list_jobs(JobFilter(ids=ids, active=False, limit=None))
            progress.update(task, completed=len(finished))
            if done.is_set():
                break
            await asyncio.sleep(0.2)


async def main() -> int:
    configure_logging(fmt="console", level="ERROR")
    settings = TaskqSettings.load(
        queues=["default", "reports"],
        max_concurrency=16,
        idle_settle_window=1.0,
        idle_poll_interval=0.5,
        health_enabled=False,
    )
    console.print(f"[bold]TaskQ demo[/] on {settings.pg_dsn} (schema {settings.schema_name})")
    conn = await connect(settings.pg_dsn)
    try:
        result = await migrate_up(conn, settings.schema_name)
    finally:
        await conn.close()
    console.print(f"migrations applied: {len(result.applied)}")

    backend = await PostgresBackend.connect(settings.pg_dsn, settings.schema_name, max_size=30)
    try:
        async with JobsClient(backend=backend, registry=registry) as client:
            rows = await client.enqueue_batch(_items())
        ids = [row.id for row in rows]
        console.print(f"enqueued {len(ids)} jobs for {len(registry)} actors")
        started = time.monotonic()
        done = asyncio.Event()
        watcher = asyncio.create_task(_progress(backend, ids, done))
        worker = Worker(settings, build_registry(registry), backend=backend, until_idle=True)
        exit_code = await worker.run()
        done.set()
        await watcher
        elapsed = time.monotonic() - started

        jobs = await backend.list_jobs(JobFilter(ids=ids, limit=None))
        table = Table(title=f"demo summary ({elapsed:.1f}s, worker exit code {exit_code})")
        for column in ("actor", "status", "jobs", "max attempt"):
            table.add_column(column)
        by_key = Counter((job.actor, job.status.value) for job in jobs)
        attempts: dict[tuple[str, str], int] = {}
        for job in jobs:
            key = (job.actor, job.status.value)
            attempts[key] = max(attempts.get(key, 0), job.attempt)
        for (actor_name, status), count in sorted(by_key.items()):
            table.add_row(actor_name, status, str(count), str(attempts[(actor_name, status)]))
        console.print(table)
    finally:
        await backend.close()

    statuses = Counter(job.status.value for job in jobs)
    expected = {"succeeded": 360, "failed": 10}
    if dict(statuses) != expected or exit_code != 3:
        console.print(f"[red]unexpected outcome: {dict(statuses)}, exit code {exit_code}")
        return 1
    console.print("[green]all jobs accounted for: 360 succeeded, 10 failed for good (as designed)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
