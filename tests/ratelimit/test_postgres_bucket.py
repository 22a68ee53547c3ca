"""PostgreSQL-only races of the limiter statements.

The bucket statement reads its clock when it starts, so an acquirer that waited for the row
lock can run after a later statement. It must not move the bucket's clock back, or the
interval between the two readings is refilled twice.

The leader's sweep of idle limiter state must not delete a sliding window whose entries an
acquirer takes while the sweep runs. Deleted, the window is sized again with unused entries
at its next use and admits its limit a second time within one window (seen as 9 units
granted in a window of 6 when a worker's first sweep met its first acquire)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

HOUR = timedelta(hours=1)


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def test_an_acquirer_behind_a_later_write_does_not_move_the_bucket_clock_back(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    rate, burst = 10.0, 10.0
    assert (await backend.acquire_token("b", rate, burst)).allowed
    # What a later statement that took the lock first leaves behind: its clock reading is
    # ahead of the next acquirer's (here by 5 s), with one token left.
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"UPDATE {pg.schema}.rate_limit_buckets "
            "SET tokens = 1, updated_at = clock_timestamp() + interval '5 seconds' WHERE key = 'b'"
        )
    finally:
        await conn.close()
    assert (await backend.acquire_token("b", rate, burst)).allowed  # the one token
    second = await backend.acquire_token("b", rate, burst)
    assert not second.allowed
    assert second.retry_after.total_seconds() > 4.5  # the counted time is still to come
    await travel(pg, 1.0)  # a second passes: still inside the time the bucket counted
    assert not (await backend.acquire_token("b", rate, burst)).allowed


async def travel(pg: PgTarget, seconds: float) -> None:
    """Let ``seconds`` pass for the bucket (its clock reading moves back)."""
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"UPDATE {pg.schema}.rate_limit_buckets "
            "SET updated_at = updated_at - make_interval(secs => $1)",
            seconds,
        )
    finally:
        await conn.close()


async def rest_windows(conn: asyncpg.Connection, pg: PgTarget) -> None:
    """Move every window entry two hours back: idle for a sweep that deletes what rested an
    hour."""
    await conn.execute(
        f"UPDATE {pg.schema}.rate_limit_window_entries "
        "SET occurred_at = occurred_at - interval '2 hours'"
    )


async def test_a_window_an_acquirer_takes_during_the_sweep_stays_whole(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    assert (await backend.acquire_window("w", 6, HOUR, 1)).allowed  # sized: six entries
    acquirer = await asyncpg.connect(pg.dsn)
    watcher = await asyncpg.connect(pg.dsn)
    try:
        await rest_windows(acquirer, pg)
        # An acquirer takes three entries, as acquire_window_entry does; not committed yet.
        taking = acquirer.transaction()
        await taking.start()
        await acquirer.execute(
            f"UPDATE {pg.schema}.rate_limit_window_entries SET occurred_at = clock_timestamp() "
            f"WHERE id IN (SELECT id FROM {pg.schema}.rate_limit_window_entries "
            "ORDER BY id LIMIT 3)"
        )
        holder = await acquirer.fetchval("SELECT pg_backend_pid()")
        sweep = asyncio.create_task(backend.sweep_idle_limiter_state(HOUR))
        # The sweep has taken its snapshot once it is done, or waits on the taken rows.
        while not sweep.done() and not await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
            holder,
        ):
            await asyncio.sleep(0.01)
        await taking.commit()
        swept = await sweep
    finally:
        await acquirer.close()
        await watcher.close()
    assert swept.windows == 0
    # Six entries, three used within the hour: three more units, and no fourth.
    assert not (await backend.acquire_window("w", 6, HOUR, 4)).allowed
    assert (await backend.acquire_window("w", 6, HOUR, 3)).allowed
    assert not (await backend.acquire_window("w", 6, HOUR, 1)).allowed


async def test_an_idle_window_nobody_takes_still_goes(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    assert (await backend.acquire_window("w", 6, HOUR, 2)).allowed
    conn = await asyncpg.connect(pg.dsn)
    try:
        await rest_windows(conn, pg)
        swept = await backend.sweep_idle_limiter_state(HOUR)
        left = await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.rate_limit_window_entries")
    finally:
        await conn.close()
    assert (swept.windows, left) == (1, 0)
    assert (await backend.acquire_window("w", 6, HOUR, 6)).allowed  # sized again, all free
