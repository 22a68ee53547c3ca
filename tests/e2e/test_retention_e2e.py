"""`taskq worker` as a real process prunes on its cron schedule: old terminal jobs reach
jobs_archive with their attempts, young ones stay. A bad retention or schedule setting stops
the worker before it starts: one line, exit 1, nothing moved."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.e2e_actors:registry"
ENV = {
    "TASKQ_HEARTBEAT_INTERVAL": "0.5",
    "TASKQ_LOCK_LEASE": "5",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "1",
    "TASKQ_CLEANUP_GRACE_PERIOD": "1",
    "TASKQ_SWEEP_INTERVAL": "1",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_LEVEL": "INFO",
    "TASKQ_LOG_FORMAT": "json",
}
OLD = 3  # old terminal jobs per status
STATUSES = ("succeeded", "failed", "cancelled")


@pytest.fixture
async def conn(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg.dsn)
    yield connection
    await connection.close()


async def add_jobs(
    conn: asyncpg.Connection, schema: str, status: str, finished_ago: timedelta, count: int
) -> None:
    """``count`` jobs in ``status`` that finished ``finished_ago``, each with an attempt."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at)
                SELECT gen_random_uuid(), 'echo', 'default', $1::{schema}.job_status, 1,
                       clock_timestamp() - $2::interval
                FROM generate_series(1, $3::integer)
                RETURNING id, finished_at
            )
            INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
            SELECT id, 1, 'succeeded', finished_at FROM made""",
        status,
        finished_ago,
        count,
    )


async def archived(conn: asyncpg.Connection, schema: str) -> int:
    count: int = await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs_archive")
    return count


@pytest.mark.slow
async def test_a_worker_prunes_old_terminal_jobs_on_its_cron_schedule(
    pg: PgTarget, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    for status in STATUSES:
        await add_jobs(conn, pg.schema, status, timedelta(hours=3), OLD)
    await add_jobs(conn, pg.schema, "succeeded", timedelta(minutes=1), 2)  # young: stays
    env = pg.env(
        **ENV,
        TASKQ_PRUNE_CRON_EXPR="* * * * *",  # the next minute boundary, at most 60 s away
        TASKQ_PRUNE_RETENTION_PERIOD="1h",
        TASKQ_ARCHIVE_RETENTION_PERIOD="2h",
    )
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        proc = await asyncio.create_subprocess_exec(
            TASKQ_BIN, "worker", "--actors", ACTORS, cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
        try:
            async with asyncio.timeout(85):
                while await archived(conn, pg.schema) < OLD * len(STATUSES):
                    assert proc.returncode is None, log.read_text()
                    await asyncio.sleep(0.2)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0, log.read_text()
    live = await conn.fetch(f"SELECT status::text, count(*) FROM {pg.schema}.jobs GROUP BY 1")
    assert {r[0]: r[1] for r in live} == {"succeeded": 2}
    assert await conn.fetchval(
        f"SELECT count(*) FROM {pg.schema}.job_attempts_archive"
    ) == OLD * len(STATUSES)
    kept = await conn.fetch(
        f"SELECT DISTINCT expire_at - archived_at FROM {pg.schema}.jobs_archive"
    )
    assert [r[0] for r in kept] == [timedelta(hours=2)]
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    [ran] = [r for r in records if r["event"] == "prune_ran" and r["total"] > 0]
    assert ran["moved"] == {status: {"default": OLD} for status in STATUSES}
    assert ran["total"] == OLD * len(STATUSES)


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("TASKQ_PRUNE_RETENTION_PERIOD", "0s", "must be a positive duration"),
        ("TASKQ_PRUNE_RETENTION_FAILED", "-3d", "must be a positive duration"),
        ("TASKQ_ARCHIVE_RETENTION_PERIOD", "0", "must be a positive duration"),
        ("TASKQ_PRUNE_CRON_EXPR", "61 * * * *", "not a valid cron expression: bad minute"),
        ("TASKQ_ARCHIVE_EXPIRY_CRON_EXPR", "* * *", "expected a 5-field cron expression"),
        ("TASKQ_PRUNE_SCHEDULE_UTC", "25:00", "expected HH:MM"),
    ],
)
async def test_a_bad_retention_setting_refuses_the_start_and_moves_nothing(
    pg: PgTarget, conn: asyncpg.Connection, variable: str, value: str, reason: str
) -> None:
    await add_jobs(conn, pg.schema, "succeeded", timedelta(days=400), 2)
    # Every minute, with everything due: a worker that started would prune at once.
    env = pg.env(**{**ENV, "TASKQ_PRUNE_CRON_EXPR": "* * * * *", variable: value})
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    message = err.decode()
    assert message.startswith(f"error: invalid setting {variable} (got {value!r}): {reason}")
    assert message.count("\n") == 1 and "Traceback" not in message
    assert out == b""
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs") == 2
    assert await archived(conn, pg.schema) == 0
