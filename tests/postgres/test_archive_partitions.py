"""The archive in time partitions, on a real server: the prune archives into the partitions
of the day its jobs expire on (made ahead by the prune), the expiry drops an ended range's
two partitions whole, rows the default partition took move into their day when it is made, a
partition change behind a long reader gives up and runs at the next pass, and an
installation upgraded with archived jobs keeps reading them while a worker drains."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from datetime import date, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog

from taskq_core.actors import actor
from taskq_core.backend.postgres import archive_partitions
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import default_directory, migrate_up
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.conftest import PgTarget
from tests.schema_pool import drop_schema, new_schema_name
from tests.worker.conftest import fast_settings

pytestmark = [pytest.mark.postgres]

KEEP = timedelta(days=1)
ARCHIVE_FOR = timedelta(days=3)
QUEUE = "old"
LIVE_QUEUE = "partition_live"


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    yield opened
    await opened.close()


async def _add_due_jobs(conn: asyncpg.Connection, schema: str, count: int) -> None:
    """``count`` failed jobs finished two days ago, each with one attempt."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at)
                SELECT gen_random_uuid(), 'work', $2, 'failed', 1,
                       clock_timestamp() - interval '2 days'
                FROM generate_series(1, $1)
                RETURNING id, finished_at
            )
            INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
            SELECT id, 1, 'failed', finished_at FROM made""",
        count,
        QUEUE,
    )


def _prune(archive_for: timedelta = ARCHIVE_FOR) -> PrunePolicy:
    return PrunePolicy(retention={JobStatus.FAILED: KEEP}, archive_for=archive_for)


async def _utc_day(conn: asyncpg.Connection, offset: timedelta) -> date:
    day: date = await conn.fetchval(
        "SELECT ((clock_timestamp() + $1::interval) AT TIME ZONE 'UTC')::date", offset
    )
    return day


async def _homes(conn: asyncpg.Connection, schema: str, table: str) -> dict[str, int]:
    """Rows of ``table`` per partition holding them."""
    records = await conn.fetch(
        f"SELECT tableoid::regclass::text AS home, count(*) AS n FROM {schema}.{table} GROUP BY 1"
    )
    return {r["home"].split(".")[-1]: r["n"] for r in records}


async def _day_partitions(conn: asyncpg.Connection, schema: str) -> set[str]:
    records = await conn.fetch(
        """SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent IN ($1::regclass, $2::regclass) AND c.relname ~ '_[0-9]{8}$'""",
        f"{schema}.jobs_archive",
        f"{schema}.job_attempts_archive",
    )
    return {r["relname"] for r in records}


def _both(day: date) -> set[str]:
    return {archive_partitions.partition_name(t, day) for t in archive_partitions.ARCHIVE_TABLES}


async def _move_to(conn: asyncpg.Connection, schema: str, day: date) -> None:
    """Make every archived job (and its attempts) expire at noon UTC of ``day``, as if
    archived for that day: the counts follow (to the range of ``day``, if one is made)."""
    await conn.execute(
        f"""WITH moved AS (
                UPDATE {schema}.jobs_archive SET expire_at = $1::date + interval '12 hours'
                RETURNING id, expire_at),
            attempts AS (
                UPDATE {schema}.job_attempts_archive a SET expire_at = m.expire_at
                FROM moved m WHERE a.job_id = m.id)
            UPDATE {schema}.archive_partitions p
            SET jobs = CASE WHEN p.starts <= $1::date AND $1::date < p.ends
                            THEN (SELECT count(*) FROM moved) ELSE 0 END""",
        day,
    )


async def test_a_prune_archives_into_the_partitions_of_the_day_its_jobs_expire_on(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 50)
    assert (await backend.prune_jobs(_prune())).total == 50
    first = await _utc_day(conn, ARCHIVE_FOR)
    # That day's and the next (a prune running past midnight) were made ahead.
    assert _both(first) | _both(first + timedelta(days=1)) <= await _day_partitions(conn, pg.schema)
    homes = await _homes(conn, pg.schema, "jobs_archive")
    attempt_homes = await _homes(conn, pg.schema, "job_attempts_archive")
    if len(homes) == 1:  # the usual case: the prune did not run across midnight UTC
        name = archive_partitions.partition_name
        assert homes == {name("jobs_archive", first): 50}
        assert attempt_homes == {name("job_attempts_archive", first): 50}
    assert "jobs_archive_default" not in homes
    assert "job_attempts_archive_default" not in attempt_homes
    counted = await conn.fetch(f"SELECT starts, ends, jobs FROM {pg.schema}.archive_partitions")
    assert sum(r["jobs"] for r in counted) == 50
    assert {(r["starts"], r["ends"]) for r in counted} == {
        (first, first + timedelta(days=1)),
        (first + timedelta(days=1), first + timedelta(days=2)),
    }


async def test_the_expiry_drops_an_ended_day_whole_and_counts_its_jobs(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 30)
    assert (await backend.prune_jobs(_prune())).total == 30
    assert await backend.expire_archive(10) == 0  # no day of expiry has ended
    made_ahead = await _day_partitions(conn, pg.schema)
    yesterday = await _utc_day(conn, -timedelta(days=1))
    await archive_partitions.make_range(backend._pool, backend._queries, yesterday, 1)
    await _move_to(conn, pg.schema, yesterday)
    assert await _homes(conn, pg.schema, "jobs_archive") == {
        archive_partitions.partition_name("jobs_archive", yesterday): 30
    }
    steps: list[int] = []
    # One step for the whole day, whatever the batch size: the partitions are dropped.
    assert await backend.expire_archive(10, on_batch=steps.append) == 30
    assert steps == [30, 0]  # the day, then the default's one (empty) batch
    assert await _day_partitions(conn, pg.schema) == made_ahead
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs_archive") == 0
    assert await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.job_attempts_archive") == 0


async def test_rows_the_default_took_move_into_their_day_when_its_partitions_are_made(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    await _add_due_jobs(conn, pg.schema, 20)
    assert (await backend.prune_jobs(_prune())).total == 20
    later = await _utc_day(conn, timedelta(days=40))  # no partition for that day yet
    await _move_to(conn, pg.schema, later)
    assert await _homes(conn, pg.schema, "jobs_archive") == {"jobs_archive_default": 20}
    assert await _homes(conn, pg.schema, "job_attempts_archive") == {
        "job_attempts_archive_default": 20
    }
    await archive_partitions.make_range(backend._pool, backend._queries, later, 1)
    assert await _homes(conn, pg.schema, "jobs_archive") == {
        archive_partitions.partition_name("jobs_archive", later): 20
    }
    assert await _homes(conn, pg.schema, "job_attempts_archive") == {
        archive_partitions.partition_name("job_attempts_archive", later): 20
    }
    # Counted by the range they moved into, for the expiry's report.
    assert await conn.fetchval(
        f"SELECT jobs FROM {pg.schema}.archive_partitions WHERE starts = $1", later
    ) == 20  # fmt: skip


async def test_a_range_of_another_width_is_clipped_to_fit_beside_the_made_ones(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    # The retention grew from days to a year: 13-day ranges are made beside 1-day ones.
    day = await _utc_day(conn, timedelta(days=60))
    pool, queries = backend._pool, backend._queries
    await archive_partitions.make_range(pool, queries, day, 1)
    for later in range(1, 30):
        await archive_partitions.make_range(pool, queries, day + timedelta(days=later), 13)
    ranges = await conn.fetch(
        f"SELECT starts, ends FROM {pg.schema}.archive_partitions ORDER BY starts"
    )
    spans = [(r["starts"], r["ends"]) for r in ranges]
    assert spans[0] == (day, day + timedelta(days=1))
    assert all(a[1] <= b[0] for a, b in pairwise(spans))  # no overlap
    assert all((e - s).days <= 13 for s, e in spans)
    assert archive_partitions.covering(day + timedelta(days=29), spans) is not None
    assert len(await _day_partitions(conn, pg.schema)) == 2 * len(spans)


async def test_a_table_in_the_way_of_a_range_leaves_the_prune_going_to_the_default(
    backend: PostgresBackend, conn: asyncpg.Connection, pg: PgTarget
) -> None:
    first = await _utc_day(conn, ARCHIVE_FOR)
    name = archive_partitions.partition_name("jobs_archive", first)
    await conn.execute(f"CREATE TABLE {pg.schema}.{name} (note text)")  # made by hand
    await _add_due_jobs(conn, pg.schema, 10)
    with structlog.testing.capture_logs() as logs:
        assert (await backend.prune_jobs(_prune())).total == 10
    deferred = [e for e in logs if e["event"] == "archive_partition_deferred"]
    assert deferred and "DuplicateTableError" in deferred[0]["error"]
    homes = await _homes(conn, pg.schema, "jobs_archive")
    assert sum(homes.values()) == 10
    if await _utc_day(conn, ARCHIVE_FOR) == first:  # the prune did not run across midnight
        assert homes == {"jobs_archive_default": 10}
    archived_ids = await conn.fetch(f"SELECT id FROM {pg.schema}.jobs_archive")
    assert all([await backend.get_archived_job(r["id"]) for r in archived_ids])


async def test_a_drop_behind_a_long_reader_gives_up_and_runs_at_the_next_pass(
    backend: PostgresBackend,
    conn: asyncpg.Connection,
    pg: PgTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(archive_partitions, "LOCK_TIMEOUT", "100ms")
    await _add_due_jobs(conn, pg.schema, 10)
    assert (await backend.prune_jobs(_prune())).total == 10
    yesterday = await _utc_day(conn, -timedelta(days=1))
    await archive_partitions.make_range(backend._pool, backend._queries, yesterday, 1)
    await _move_to(conn, pg.schema, yesterday)
    reader = await asyncpg.connect(pg.dsn)
    try:
        async with reader.transaction():
            # A report reading the archive keeps its lock on every partition until it ends.
            assert await reader.fetchval(f"SELECT count(*) FROM {pg.schema}.jobs_archive") == 10
            assert await backend.expire_archive(10) == 0
            assert _both(yesterday) <= await _day_partitions(conn, pg.schema)
    finally:
        await reader.close()
    assert await backend.expire_archive(10) == 10
    assert not _both(yesterday) & await _day_partitions(conn, pg.schema)


# --- an installation archived before the partitions ---------------------------------------
@actor(queue=LIVE_QUEUE)
async def partition_tick(payload: dict[str, Any]) -> None:
    return None


def _worker(backend: PostgresBackend) -> Worker:
    settings = fast_settings(queues=[LIVE_QUEUE], lock_lease=30.0)
    actors = {partition_tick.name: partition_tick}
    return Worker(settings, actors, backend=backend, install_signal_handlers=False)


@pytest.fixture
async def old_schema(pg_server_dsn: str, tmp_path: Path) -> AsyncIterator[str]:
    """A schema migrated as the release before the partitions left it (up to 0020)."""
    before = tmp_path / "migrations"
    before.mkdir()
    for path in sorted(default_directory().glob("*.sql")):
        if path.name < "0021":
            shutil.copy(path, before / path.name)
    schema = new_schema_name()
    conn = await asyncpg.connect(pg_server_dsn)
    try:
        await migrate_up(conn, schema, before)
    finally:
        await conn.close()
    yield schema
    await drop_schema(pg_server_dsn, schema)


# Archived jobs of the old installation; TASKQ_TEST_UPGRADE_ARCHIVED=1000000 for the upgrade
# of a million-row archive (docs/operations.md, "The archive by day").
ARCHIVED = int(os.environ.get("TASKQ_TEST_UPGRADE_ARCHIVED", "20000"))


async def _archive_the_old_way(conn: asyncpg.Connection, schema: str) -> None:
    """ARCHIVED jobs in the unpartitioned archive with an attempt each: half expired two
    days ago, half expiring in ten days."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs_archive (id, actor, queue, status, attempt,
                                                   finished_at, archived_at, expire_at)
                SELECT gen_random_uuid(), 'work', $2, 'failed', 1, now(), now(),
                       CASE WHEN n % 2 = 0 THEN now() - interval '2 days'
                            ELSE now() + interval '10 days' END
                FROM generate_series(1, $1) AS n
                RETURNING id)
            INSERT INTO {schema}.job_attempts_archive (job_id, attempt, outcome)
            SELECT id, 1, 'failed' FROM made""",
        ARCHIVED,
        QUEUE,
    )


async def test_an_upgrade_keeps_the_archive_readable_while_a_worker_drains(
    pg_server_dsn: str, old_schema: str
) -> None:
    conn = await asyncpg.connect(pg_server_dsn)
    backend = await PostgresBackend.connect(pg_server_dsn, old_schema, max_size=4)
    worker = _worker(backend)
    running: asyncio.Task[int] | None = None
    try:
        await _archive_the_old_way(conn, old_schema)
        kept = await conn.fetchval(
            f"SELECT id FROM {old_schema}.jobs_archive WHERE expire_at > now() LIMIT 1"
        )
        running = asyncio.create_task(worker.run())
        await backend.enqueue_batch(
            [EnqueueArgs(partition_tick.name, {"n": n}, queue=LIVE_QUEUE) for n in range(300)]
        )
        migrator = await asyncpg.connect(pg_server_dsn)
        try:
            result = await migrate_up(migrator, old_schema)
        finally:
            await migrator.close()
        assert result.applied == ["0021_partition_the_archive", "0022_one_running_index"]
        await backend.enqueue_batch(
            [EnqueueArgs(partition_tick.name, {"n": n}, queue=LIVE_QUEUE) for n in range(300)]
        )
        async with asyncio.timeout(120):
            while await conn.fetchval(
                f"SELECT count(*) FROM {old_schema}.jobs WHERE status = 'succeeded'"
            ) < 600:  # fmt: skip
                await asyncio.sleep(0.05)
        worker.stop()
        assert await asyncio.wait_for(running, 30) == 0

        # The old rows are the default partition's, read as before.
        assert await _homes(conn, old_schema, "jobs_archive") == {"jobs_archive_default": ARCHIVED}
        archived = await backend.get_archived_job(kept)
        assert archived is not None and archived.job.queue == QUEUE
        assert [a.outcome for a in await backend.get_archived_attempts(kept)] == ["failed"]
        # The expiry deletes the default's rows of ended days, with their attempts.
        assert await backend.expire_archive(5_000) == ARCHIVED // 2
        remaining = await conn.fetchrow(
            f"""SELECT (SELECT count(*) FROM {old_schema}.jobs_archive) AS jobs,
                       (SELECT count(*) FROM {old_schema}.job_attempts_archive) AS attempts"""
        )
        assert dict(remaining or {}) == {"jobs": ARCHIVED // 2, "attempts": ARCHIVED // 2}
        # New archives go to day partitions.
        await backend.prune_jobs(
            PrunePolicy(
                retention={JobStatus.SUCCEEDED: timedelta(microseconds=1)},
                archive_for=ARCHIVE_FOR,
                queue=LIVE_QUEUE,
            )
        )
        homes = await _homes(conn, old_schema, "jobs_archive")
        assert homes.pop("jobs_archive_default") == ARCHIVED // 2
        assert sum(homes.values()) == 600 and all(h.startswith("jobs_archive_2") for h in homes)
        assert await conn.fetchval(f"SELECT sum(jobs) FROM {old_schema}.archive_partitions") == 600
    finally:
        if running is not None and not running.done():  # a failed assertion: stop it first
            worker.stop()
            await asyncio.wait_for(running, 30)
        await backend.close()
        await conn.close()
