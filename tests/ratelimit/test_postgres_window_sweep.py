"""PostgreSQL-only: the leader's sweep of idle limiter state must not delete a sliding
window whose entries an acquirer takes while the sweep runs. Deleted, the window is sized
again with unused entries at its next use and admits its limit a second time within one
window (seen as 9 units granted in a window of 6 when a worker's first sweep met its first
acquire)."""

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


async def test_a_window_an_acquirer_takes_during_the_sweep_stays_whole(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    assert (await backend.acquire_window("w", 6, HOUR, 1)).allowed  # sized: six entries
    acquirer = await asyncpg.connect(pg.dsn)
    watcher = await asyncpg.connect(pg.dsn)
    try:
        # Unused for two hours: idle for a sweep that deletes what rested an hour.
        await acquirer.execute(
            f"UPDATE {pg.schema}.rate_limit_window_entries "
            "SET occurred_at = occurred_at - interval '2 hours'"
        )
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
        await conn.execute(
            f"UPDATE {pg.schema}.rate_limit_window_entries "
            "SET occurred_at = occurred_at - interval '2 hours'"
        )
        swept = await backend.sweep_idle_limiter_state(HOUR)
        left = await conn.fetchval(f"SELECT count(*) FROM {pg.schema}.rate_limit_window_entries")
    finally:
        await conn.close()
    assert (swept.windows, left) == (1, 0)
    assert (await backend.acquire_window("w", 6, HOUR, 6)).allowed  # sized again, all free
