"""Bulk enqueue (binary COPY encoded by ``bulk``): what it stores is what it returns."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.ids import uuid7, uuid7_batch
from taskq_core.jsontext import UnstorableValueError
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield opened
    await opened.close()


def rich(n: int) -> EnqueueArgs:
    """An item that sets every column the COPY writes (days in the intervals on purpose)."""
    return EnqueueArgs(
        actor=f"actor-{n % 2}",
        payload={"n": n, "text": "tab\there\nünï", "float": 2.5, "list": [1, None]},
        queue="bulk",
        priority=-(2**31) if n == 0 else n,
        delay=timedelta(days=1, seconds=3, microseconds=7) if n % 2 else None,
        identity_key=f"id-{n}",
        fairness_key="tenant",
        schedule_to_close=timedelta(days=2, microseconds=1),
        retry_kind="indefinite",
        max_attempts=2**31 - 1,
        result_ttl=timedelta(days=3, hours=4),
        metadata={"source": "bulk", "n": n},
        trace_id="t" * 32,
        span_id="s" * 16,
    )


async def test_enqueue_batch_returns_exactly_the_stored_rows(backend: PostgresBackend) -> None:
    rows = await backend.enqueue_batch([rich(n) for n in range(4)])
    assert [await backend.get(row.id) for row in rows] == rows


async def test_a_callers_own_connection_without_codecs_takes_the_same_path(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        async with conn.transaction():
            rows = await backend.enqueue_batch([rich(1)], connection=conn)
            assert await backend.enqueue_batch_fast([rich(2)], connection=conn) == 1
    finally:
        await conn.close()
    assert await backend.get(rows[0].id) == rows[0]
    assert len(await backend.list_jobs(JobFilter(queue="bulk"))) == 2


async def test_a_batch_of_many_slices_returns_every_row_in_order(
    backend: PostgresBackend,
) -> None:
    items = [rich(n) for n in range(2_345)]  # the COPY streams it in slices of 587 rows
    rows = await backend.enqueue_batch(items)
    assert [row.payload["n"] for row in rows] == list(range(2_345))
    stored = await backend.list_jobs(JobFilter(queue="bulk", limit=None))
    assert {row.id: row for row in stored} == {row.id: row for row in rows}


async def test_caller_ids_are_kept_and_the_others_minted_in_item_order(
    backend: PostgresBackend,
) -> None:
    own = [uuid4() for _ in range(3)]
    items = [
        EnqueueArgs("a", {"n": n}, job_id=own[n // 400] if n % 400 == 0 else None)
        for n in range(1_200)
    ]
    assert await backend.enqueue_batch_fast(items) == 1_200
    stored = await backend.list_jobs(JobFilter(actor="a", limit=None))
    by_n = {row.payload["n"]: row.id for row in stored}
    assert [by_n[0], by_n[400], by_n[800]] == own
    minted = [by_n[n] for n in range(1_200) if n % 400]
    assert all(a < b for a, b in itertools.pairwise(minted))
    assert {job_id.version for job_id in minted} == {7}


@pytest.mark.parametrize(
    "bad",
    [{"x": float("nan")}, {"x": object()}, {"x": "nul\x00"}],
    ids=["nan", "not-json", "nul"],
)
async def test_an_invalid_item_in_a_late_slice_rolls_back_the_whole_batch(
    backend: PostgresBackend, pg: PgTarget, bad: dict[str, object]
) -> None:
    """Earlier slices already reached the server: the transaction takes them back."""
    items = [EnqueueArgs("a", {"n": n}, queue="bulk") for n in range(2_500)]
    items[2_200] = EnqueueArgs("a", bad, queue="bulk")
    with pytest.raises(UnstorableValueError):
        await backend.enqueue_batch_fast(items)
    with pytest.raises(UnstorableValueError):
        await backend.enqueue_batch(items)
    assert await backend.list_jobs(JobFilter(queue="bulk")) == []

    # Inside a caller's transaction only the batch rolls back; the caller's work commits.
    conn = await asyncpg.connect(pg.dsn)
    try:
        async with conn.transaction():
            kept = await backend.enqueue(
                EnqueueArgs("a", {"kept": True}, queue="bulk"), connection=conn
            )
            with pytest.raises(UnstorableValueError):
                await backend.enqueue_batch_fast(items, connection=conn)
    finally:
        await conn.close()
    assert [row.id for row in await backend.list_jobs(JobFilter(queue="bulk"))] == [kept.id]


def test_bulk_ids_are_increasing_and_follow_single_ones() -> None:
    before = uuid7()
    ids = uuid7_batch(5000)  # more than one millisecond's 12-bit counter
    after = uuid7()
    assert before < ids[0] and ids[-1] < after
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert {i.version for i in ids} == {7}
    assert uuid7_batch(0) == []
