"""``<schema>.enqueue(...)``: the SQL entry point for producers in any language makes the row
``JobsClient.enqueue`` makes for the same actor by name (its stored queue, priority, retry
policy), holds unique keys, honours max_pending, wakes workers for a job due now, and refuses
bad input with SQLSTATEs a driver can tell apart. A worker runs what it enqueued; the psql
example of docs/sql-api.md runs as written."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from taskq_core import JobContext, Workflow, actor
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import JobRow
from taskq_core.backend.protocol.worker import ActorDeclaration
from taskq_core.client import JobsClient
from taskq_core.constants import EXIT_OK, wake_channel
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.conftest import PgTarget
from tests.worker.conftest import fast_settings

pytestmark = pytest.mark.postgres

DOC = (Path(__file__).resolve().parents[2] / "docs" / "sql-api.md").read_text()
SAME_FIELDS = (
    "actor", "queue", "payload", "status", "priority", "retry_kind", "max_attempts",
    "attempt", "metadata", "result_ttl", "identity_key", "fairness_key", "unique_key",
    "unique_until", "cancel_phase", "uncounted_attempts",
)  # fmt: skip


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield opened
    await opened.close()


async def declare(backend: PostgresBackend, name: str, **fields: object) -> None:
    """What a worker's start-up stores for the actor."""
    declaration = ActorDeclaration(name, fields.pop("queue", "default"), {}, None, None, None)
    await backend.sync_actor_configs([replace(declaration, **fields)], force=True)  # type: ignore[arg-type]


async def sql_enqueue(conn: asyncpg.Connection, schema: str, *args: object) -> UUID:
    placeholders = ", ".join(f"${n}" for n in range(1, len(args) + 1))
    value = await conn.fetchval(f"SELECT {schema}.enqueue({placeholders})", *args)
    assert isinstance(value, UUID)
    return value


async def row(backend: PostgresBackend, job_id: UUID) -> JobRow:
    job = await backend.get(job_id)
    assert job is not None
    return job


@pytest.mark.parametrize("kind", ["transient", "indefinite", "non_retryable"])
async def test_the_row_is_the_one_the_client_makes_by_name(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget, kind: str
) -> None:
    await declare(
        backend, "resize", queue="media", retry_kind=kind, max_attempts=5, priority=4,
        retry_time_budget=timedelta(hours=2),
    )  # fmt: skip
    async with JobsClient(backend=backend) as client:
        by_client = await client.enqueue("resize", {"url": "u", "w": [1, 2]})
    by_sql = await row(
        backend, await sql_enqueue(conn, pg.schema, "resize", '{"url": "u", "w": [1, 2]}')
    )
    for name in SAME_FIELDS:
        assert getattr(by_sql, name) == getattr(by_client, name), name
    assert by_sql.id.version == 7 and by_sql.id > by_client.id  # time-ordered, as uuid7()
    for job in (by_client, by_sql):
        budget = job.schedule_to_close
        assert (budget is not None) == (kind == "indefinite")
        if budget is not None:
            assert budget - job.created_at == timedelta(hours=2)


async def test_options_an_unknown_actor_and_the_defaults(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    plain = await row(backend, await sql_enqueue(conn, pg.schema, "never_seen", None))
    assert (plain.queue, plain.priority, plain.payload) == ("default", 0, {})
    assert (plain.retry_kind, plain.max_attempts, plain.status) == (
        "transient",
        3,
        JobStatus.PENDING,
    )
    now = await conn.fetchval("SELECT clock_timestamp()")
    later = now + timedelta(hours=1)
    given = await row(
        backend,
        await sql_enqueue(conn, pg.schema, "never_seen", '{"a": 1}', "reports", later, 9, "k:1"),
    )
    assert (given.queue, given.priority, given.unique_key) == ("reports", 9, "k:1")
    assert (given.status, given.scheduled_at) == (JobStatus.SCHEDULED, later)


async def test_workers_are_woken_for_a_job_due_now_only(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(pg.dsn)
    await listener.add_listener(wake_channel(pg.schema), lambda *args: heard.put_nowait("wake"))
    try:
        later = await conn.fetchval("SELECT clock_timestamp() + interval '1 hour'")
        await sql_enqueue(conn, pg.schema, "work", "{}", None, later)
        await sql_enqueue(conn, pg.schema, "work", "{}")
        await asyncio.wait_for(heard.get(), 10)
        assert heard.empty()  # the scheduled one, committed first, woke no one
    finally:
        await listener.close()


async def test_a_held_unique_key_is_refused_naming_its_holder(
    conn: asyncpg.Connection, pg: PgTarget
) -> None:
    first = await sql_enqueue(conn, pg.schema, "work", "{}", None, None, None, "nightly")
    with pytest.raises(asyncpg.UniqueViolationError, match="unique key 'nightly' exists") as info:
        await sql_enqueue(conn, pg.schema, "work", "{}", None, None, None, "nightly")
    assert info.value.detail == str(first)
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs") == 1


async def test_a_waiting_workflow_step_holding_the_key_is_named_too(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    workflow = Workflow("keyed")
    root = workflow.add("work", {}, name="root")
    workflow.add("work", {}, name="later", after=root, unique_key="nightly")
    async with JobsClient(backend=backend) as client:
        run = await client.enqueue_workflow(workflow)
    assert (await row(backend, run.jobs["later"])).status is JobStatus.WAITING
    with pytest.raises(asyncpg.UniqueViolationError, match="unique key 'nightly' exists") as info:
        await sql_enqueue(conn, pg.schema, "work", "{}", None, None, None, "nightly")
    assert info.value.detail == str(run.jobs["later"])


async def test_max_pending_is_honoured(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await declare(backend, "work")
    await conn.execute(f"UPDATE {pg.schema}.actor_config SET max_pending = 1")
    await sql_enqueue(conn, pg.schema, "work", "{}")
    with pytest.raises(asyncpg.PostgresError, match="max_pending is 1") as info:
        await sql_enqueue(conn, pg.schema, "work", "{}")
    assert info.value.sqlstate == "53400"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "{}"), "actor name must not be empty"),
        (("work", "[1, 2]"), "payload must be a JSON object, got array"),
        (("work", "{}", "bad queue!"), "invalid queue name 'bad queue!'"),
        (("work", "{}", None, None, None, ""), "unique_key must not be empty"),
        (("work", '{"x": "' + "a" * 1_100_000 + '"}'), "over the limit of 1048576 bytes"),
    ],
)
async def test_bad_input_is_refused_as_an_invalid_parameter(
    conn: asyncpg.Connection, pg: PgTarget, args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(asyncpg.InvalidParameterValueError, match=re.escape(message)):
        await sql_enqueue(conn, pg.schema, *args)
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs") == 0


@actor
async def shout(payload: dict[str, str], ctx: JobContext[dict[str, str]]) -> str:
    return payload["word"].upper()


async def test_a_worker_runs_what_it_enqueued(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    job_id = await sql_enqueue(conn, pg.schema, "shout", '{"word": "hi"}')
    worker = Worker(
        fast_settings(), {"shout": shout}, backend=backend, until_idle=True,
        install_signal_handlers=False,
    )  # fmt: skip
    assert await asyncio.wait_for(worker.run(), 60) == EXIT_OK
    done = await row(backend, job_id)
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, "HI")


def test_the_documented_psql_example_runs(pg: PgTarget) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("needs psql (Debian's postgresql-client)")
    (example,) = re.findall(r"```sql\n(.*?)```", DOC, flags=re.DOTALL)
    script = example.replace("taskq.", f"{pg.schema}.")
    result = subprocess.run(
        [psql, pg.dsn, "-X", "-v", "ON_ERROR_STOP=1", "-tA", "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert UUID(result.stdout.strip().splitlines()[-1]).version == 7
