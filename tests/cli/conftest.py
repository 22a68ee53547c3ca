"""CLI fixtures: run `taskq` against the test's own schema, and read the database it changed.

``cli(*args)`` runs ``taskq`` in-process with TASKQ_PG_DSN/TASKQ_SCHEMA_NAME aimed at the
test schema. ``db`` reaches the same schema through the Backend protocol (and raw SQL for
the few facts the protocol does not expose, like moving time back), so every test can
assert what the command really changed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import (
    ActorDeclaration,
    Backend,
    EnqueueArgs,
    ErrorInfo,
    JobFilter,
    JobRow,
    PrunePolicy,
    WorkerInfo,
)
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

T = TypeVar("T")
LEASE = timedelta(seconds=60)


class Db:
    """Synchronous access to the test schema for CLI tests (each call is its own session)."""

    def __init__(self, pg: PgTarget) -> None:
        self.pg = pg

    def call(self, action: Callable[[Backend], Awaitable[T]]) -> T:
        """Run ``action(backend)`` on a fresh PostgresBackend and return its result."""

        async def run() -> T:
            backend = await PostgresBackend.connect(self.pg.dsn, self.pg.schema, max_size=2)
            try:
                return await action(backend)
            finally:
                await backend.close()

        return asyncio.run(run())

    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Raw SQL on the test schema (``{schema}`` substituted): setup and time travel only."""

        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.pg.dsn)
            try:
                return list(await conn.fetch(query.replace("{schema}", self.pg.schema), *args))
            finally:
                await conn.close()

        return asyncio.run(run())

    def enqueue(self, actor: str = "work", **fields: Any) -> JobRow:
        """One job, straight through the backend."""
        return self.call(lambda b: b.enqueue(EnqueueArgs(actor=actor, **fields)))

    def get(self, job_id: UUID | str) -> JobRow:
        """A job that must exist."""
        row = self.call(lambda b: b.get(UUID(str(job_id))))
        assert row is not None, job_id
        return row

    def jobs(self, **criteria: Any) -> list[JobRow]:
        """Every job matching a JobFilter's fields."""
        return self.call(lambda b: b.list_jobs(JobFilter(limit=None, **criteria)))

    def count(self, table: str) -> int:
        """Rows in one table of the schema."""
        return int(self.sql(f"SELECT count(*) AS n FROM {{schema}}.{table}")[0]["n"])

    def register_actor(
        self, actor: str = "work", queue: str = "default", max_concurrent: int | None = None
    ) -> None:
        """What a worker's start-up does for one actor: create its actor_config row."""
        declaration = ActorDeclaration(actor, queue, {}, max_concurrent, None, None)
        self.call(lambda b: b.sync_actor_configs([declaration], force=False))

    def register_worker(
        self, queues: list[str], actors: list[str], concurrency: int = 4, **fields: Any
    ) -> UUID:
        """A worker row, as ``taskq worker`` writes at start."""
        worker = uuid4()
        info = WorkerInfo(worker, "host-a", 4242, queues, actors, concurrency, **fields)
        self.call(lambda b: b.register_worker(info))
        return worker

    def claim(self, worker: UUID, queue: str = "default", limit: int = 1) -> list[JobRow]:
        """Dispatch like a worker would."""
        return self.call(lambda b: b.dispatch_batch(worker, [queue], limit, LEASE))

    def fail(self, claimed: JobRow, error: str = "ValueError") -> None:
        """The worker's terminal write for a failed attempt of a job it claimed."""
        self.call(
            lambda b: b.mark_failed_or_retry(
                claimed.lease(), ErrorInfo(error, "boom", "Traceback: boom"), None, ran_for=0.0
            )
        )

    def failed_job(self, actor: str = "work", queue: str = "default") -> JobRow:
        """A job that ran once and failed for good (its priority makes it dispatch first)."""
        job = self.enqueue(actor, queue=queue, max_attempts=1, priority=1000)
        claimed = self.claim(uuid4(), queue)
        assert [c.id for c in claimed] == [job.id]
        self.fail(claimed[0])
        return self.get(job.id)

    def succeeded_job(self, actor: str = "work", queue: str = "default") -> JobRow:
        """A job that ran once and succeeded."""
        job = self.enqueue(actor, queue=queue, priority=1000)
        claimed = self.claim(uuid4(), queue)
        assert [c.id for c in claimed] == [job.id]
        self.call(lambda b: b.mark_succeeded(claimed[0].lease(), {"ok": True}))
        return self.get(job.id)

    def cancelled_job(self, actor: str = "work", queue: str = "default") -> JobRow:
        """A waiting job cancelled at once."""
        job = self.enqueue(actor, queue=queue)
        assert self.call(lambda b: b.write_cancel_request(job.id, "test")) == "cancelled"
        return self.get(job.id)

    def finished_ago(self, job: JobRow, ago: timedelta) -> None:
        """Move a terminal job's finish back in time (on the database's clock)."""
        self.sql(
            "UPDATE {schema}.jobs SET finished_at = clock_timestamp() - $2::interval WHERE id = $1",
            job.id,
            ago,
        )

    def archive(self, job: JobRow) -> None:
        """Prune one terminal job to the archive (for a year), as the prune would."""
        self.finished_ago(job, timedelta(days=2))
        policy = PrunePolicy(
            {job.status: timedelta(days=1)}, archive_for=timedelta(days=365), queue=job.queue
        )
        result = self.call(lambda b: b.prune_jobs(policy))
        assert result.moved == {(job.status, job.queue): 1}, result


@pytest.fixture
def db(pg: PgTarget) -> Db:
    """The test schema, through the Backend protocol."""
    return Db(pg)


@pytest.fixture
def cli(taskq_cli: Any, pg: PgTarget) -> Callable[..., CliResult]:
    """Run ``taskq ARGS`` in-process against the test schema."""

    def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
        result: CliResult = taskq_cli(*args, env={**pg.env(), **(env or {})})
        return result

    return run


def parse_json(result: CliResult) -> Any:
    """The one JSON document a ``--json`` command printed (and nothing else on stdout)."""
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def one_error_line(result: CliResult) -> str:
    """Assert the failure contract (exit 1, one stderr line, no traceback); return the line."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip()


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A data directory for an embedded server the test creates; stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="taskq-cli-embedded-"))
    yield root / "pgdata"
    subprocess.run(
        [TASKQ_BIN, "--dsn", f"embedded:{root / 'pgdata'}", "embedded", "stop"],
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(root, ignore_errors=True)
