"""PostgreSQL-only: the bucket statement reads its clock when it starts, so an acquirer that
waited for the row lock can run after a later statement. It must not move the bucket's clock
back, or the interval between the two readings is refilled twice."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


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
