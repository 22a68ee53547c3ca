"""Batches where only PostgreSQL can show it: the last children ending on two connections at
the same moment make one finalizer, hooks that waited for another's row lock find the batch
ended, and the hook's probe and the counts read jobs_batch_idx, never the whole jobs table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import (
    FINALIZES_KEY,
    BatchOutcome,
    BatchStatus,
    BatchTransition,
    EnqueueArgs,
    ErrorInfo,
    JobFilter,
    JobRow,
    NewBatch,
    Start,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import generic_plan, scan_names

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

LEASE = timedelta(minutes=5)
ROUNDS = 30
HOOKS = 20
NON_BATCH_JOBS = 100_000
FINALIZER_QUEUE = "finalizers"
BOOM = ErrorInfo("ValueError", "boom", None)


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    # Room for every concurrent hook on a connection of its own.
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=HOOKS + 2)
    yield opened
    await opened.close()


async def batch_of_running_children(
    backend: PostgresBackend, children: int, *, threshold: int | None = None
) -> tuple[NewBatch, list[JobRow]]:
    """A batch with a finalizer whose children all run (claimed and started)."""
    batch_id = uuid7()
    queue = f"q_{uuid4().hex[:10]}"
    finalizer = EnqueueArgs(
        "finalize", queue=FINALIZER_QUEUE, job_id=uuid7(), metadata={FINALIZES_KEY: str(batch_id)}
    )
    batch = NewBatch(batch_id, queue, children, threshold, finalizer)
    async with backend.transaction() as tx:
        await backend.create_batch(batch, connection=tx)
        items = [EnqueueArgs("work", queue=queue, metadata={"batch_id": str(batch_id)})] * children
        await backend.enqueue_batch(items, connection=tx)
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [queue], children, LEASE)
    assert len(claimed) == children
    started = await backend.mark_started_many(worker, [Start(j.id, j.attempt) for j in claimed])
    assert len(started) == children
    return batch, claimed


async def finalizer_jobs(backend: PostgresBackend, batch: NewBatch) -> list[JobRow]:
    jobs = await backend.list_jobs(JobFilter(queue=FINALIZER_QUEUE, limit=None))
    return [job for job in jobs if job.metadata.get(FINALIZES_KEY) == str(batch.id)]


async def assert_ended_once(
    backend: PostgresBackend,
    batch: NewBatch,
    results: list[list[BatchTransition]],
    status: BatchStatus = BatchStatus.COMPLETE,
) -> None:
    """Exactly one hook reported the end; the row and the one finalizer agree with it."""
    assert batch.finalizer is not None
    reported = [t for result in results for t in result]
    assert [(t.batch_id, t.status) for t in reported] == [(batch.id, status)]
    assert reported[0].finalizer_job_id == batch.finalizer.job_id
    row = await backend.get_batch(batch.id)
    assert row is not None
    assert (row.status, row.finalizer_job_id) == (status, batch.finalizer.job_id)
    assert [job.id for job in await finalizer_jobs(backend, batch)] == [batch.finalizer.job_id]


async def test_the_last_two_children_ending_together_make_one_finalizer(
    backend: PostgresBackend,
) -> None:
    for round_number in range(ROUNDS):
        batch, children = await batch_of_running_children(backend, 2)
        # Odd rounds: both writes commit before either hook starts, so both probes find no
        # child running and both hooks race for the row lock. Even rounds: each hook follows
        # its own write at once, wherever the other is.
        written = asyncio.Barrier(2) if round_number % 2 == 1 else None
        results = await asyncio.gather(
            *(finish_and_hook(backend, batch, child, written) for child in children)
        )
        await assert_ended_once(backend, batch, list(results))


async def finish_and_hook(
    backend: PostgresBackend, batch: NewBatch, child: JobRow, written: asyncio.Barrier | None
) -> list[BatchTransition]:
    """A worker's success and then its hook (after ``written``, when given)."""
    assert await backend.mark_succeeded(child.lease(), {"ok": True})
    if written is not None:
        await written.wait()
    return await backend.apply_batch_outcomes([BatchOutcome(batch.id, JobStatus.SUCCEEDED)])


async def test_twenty_hooks_at_once_on_one_batch_make_one_finalizer(
    backend: PostgresBackend,
) -> None:
    batch, children = await batch_of_running_children(backend, HOOKS)
    for child in children:
        assert await backend.mark_succeeded(child.lease(), None)
    start = asyncio.Event()

    async def hook() -> list[BatchTransition]:
        await start.wait()
        return await backend.apply_batch_outcomes([BatchOutcome(batch.id, JobStatus.SUCCEEDED)])

    hooks = [asyncio.create_task(hook()) for _ in range(HOOKS)]
    await asyncio.sleep(0)  # every hook waits on the start line
    start.set()
    await assert_ended_once(backend, batch, list(await asyncio.gather(*hooks)))


async def hooks_waiting_on_the_batch_row(pg: PgTarget) -> int:
    conn = await asyncpg.connect(pg.dsn)
    try:
        waiting: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database() "
            "AND query LIKE '%FROM ' || $1 || '.batches%FOR UPDATE%'",
            pg.schema,
        )
    finally:
        await conn.close()
    return waiting


async def test_hooks_that_waited_for_the_row_lock_find_the_batch_ended(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    batch, children = await batch_of_running_children(backend, 2, threshold=1)
    for child in children:
        assert await backend.mark_failed_or_retry(child.lease(), BOOM, None) is not None
    holder = await asyncpg.connect(pg.dsn)
    try:
        # Another transaction holds the batch row, as a hook in progress does.
        held = holder.transaction()
        await held.start()
        lock = f"SELECT 1 FROM {pg.schema}.batches WHERE id = $1 FOR UPDATE"
        await holder.execute(lock, batch.id)
        outcome = BatchOutcome(batch.id, JobStatus.FAILED)
        hooks = [asyncio.create_task(backend.apply_batch_outcomes([outcome])) for _ in range(2)]
        async with asyncio.timeout(30):
            while await hooks_waiting_on_the_batch_row(pg) < 2:
                assert not any(h.done() for h in hooks), [h.result() for h in hooks if h.done()]
                await asyncio.sleep(0.05)
        await held.commit()
    finally:
        await holder.close()
    results = [await asyncio.wait_for(h, 30) for h in hooks]
    # The first hook through the lock aborts the batch (threshold 1); the second one reads
    # the row as the first committed it, aborted, and changes nothing.
    await assert_ended_once(backend, batch, results, BatchStatus.ABORTED)
    row = await backend.get_batch(batch.id)
    assert row is not None and row.consecutive_failures == 1


async def test_the_stale_sweep_skips_a_batch_a_hook_holds_and_the_hook_ends_it(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    batch, [child] = await batch_of_running_children(backend, 1)
    assert await backend.mark_succeeded(child.lease(), None)
    holder = await asyncpg.connect(pg.dsn)
    try:
        async with holder.transaction():
            await holder.execute(
                f"SELECT 1 FROM {pg.schema}.batches WHERE id = $1 FOR UPDATE", batch.id
            )
            assert await backend.complete_stale_batches() == []  # skipped, not waited for
    finally:
        await holder.close()
    moved = await backend.apply_batch_outcomes([BatchOutcome(batch.id, JobStatus.SUCCEEDED)])
    await assert_ended_once(backend, batch, [moved, await backend.complete_stale_batches()])


# --- index paths -----------------------------------------------------------------------------
async def add_pending_children(
    conn: asyncpg.Connection, schema: str, batch_id: UUID, count: int
) -> None:
    await conn.execute(
        f"""INSERT INTO {schema}.jobs (id, actor, queue, status, metadata)
            SELECT gen_random_uuid(), 'work', 'q', 'pending',
                   jsonb_build_object('batch_id', $1::uuid::text)
            FROM generate_series(1, {count})""",
        batch_id,
    )


async def settle_batches_plan(
    conn: asyncpg.Connection, schema: str, batch_id: UUID, *, abort: bool
) -> dict[str, Any]:
    """The hook's settle statement's generic plan for one batch, aborting or not."""
    args = (
        "ARRAY[3], ARRAY[true], 'aborted', ARRAY[5]"
        if abort
        else "ARRAY[0], ARRAY[false], 'aborted', ARRAY[0]"
    )
    return await generic_plan(
        conn,
        render("settle_batches", schema),
        "uuid[], integer[], boolean[], text, integer[]",
        f"ARRAY['{batch_id}']::uuid[], {args}",
    )


@pytest.mark.slow
async def test_the_hook_probe_counts_and_sweeps_use_jobs_batch_idx(pg: PgTarget) -> None:
    schema = pg.schema
    batch_id = uuid7()
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"""INSERT INTO {schema}.jobs (id, actor, queue, status, metadata)
                SELECT gen_random_uuid(), 'work', 'q' || (n % 8),
                       (ARRAY['pending', 'succeeded', 'failed', 'running'])[1 + n % 4]
                           ::{schema}.job_status,
                       jsonb_build_object('n', n)
                FROM generate_series(1, {NON_BATCH_JOBS}) AS n"""
        )
        await add_pending_children(conn, schema, batch_id, 50)
        await conn.execute(
            f"""INSERT INTO {schema}.batches (id, queue, status, completed_at)
                SELECT CASE WHEN n = 1 THEN $1::uuid ELSE gen_random_uuid() END, 'q',
                       CASE WHEN n % 2 = 0 THEN 'complete' ELSE 'active' END,
                       CASE WHEN n % 2 = 0 THEN now() - interval '2 days' END
                FROM generate_series(1, 20000) AS n""",
            batch_id,
        )
        for table in ("jobs", "batches"):
            await conn.execute(f"ANALYZE {schema}.{table}")
        one = f"ARRAY['{batch_id}']::uuid[]"
        plans = {
            "settle_batches": await settle_batches_plan(conn, schema, batch_id, abort=False),
            "settle_batches (abort)": await settle_batches_plan(conn, schema, batch_id, abort=True),
            "count_batch_jobs": await generic_plan(
                conn, render("count_batch_jobs", schema), "uuid", f"'{batch_id}'"
            ),
            "list_batches": await generic_plan(
                conn,
                render("list_batches", schema),
                "text, boolean, uuid, integer",
                "NULL, NULL, NULL, 50",
            ),
            "complete_stale_batches": await generic_plan(
                conn, render("complete_stale_batches", schema), "integer", "100"
            ),
            "prune_old_batches": await generic_plan(
                conn, render("prune_old_batches", schema), "interval, integer", "'1 day', 1000"
            ),
        }
        finalizers = await generic_plan(
            conn,
            render("set_batch_finalizers", schema),
            "uuid[], uuid[]",
            f"{one}, ARRAY['{uuid7()}']::uuid[]",
        )
    finally:
        await conn.close()
    for name, plan in plans.items():
        found = scan_names(plan)
        assert any("jobs_batch_idx" in scan for scan in found), (name, found)
        assert not any(scan.endswith(" jobs") for scan in found), (name, found)
    # The writes find their batch rows by primary key, never by scanning batches.
    for name in ("settle_batches", "complete_stale_batches", "prune_old_batches"):
        found = scan_names(plans[name])
        assert "Seq Scan batches" not in found, (name, found)
    assert "Seq Scan batches" not in scan_names(finalizers), scan_names(finalizers)


@pytest.mark.slow
async def test_a_hook_of_a_batch_that_fills_the_table_reads_no_job_it_does_not_cancel(
    pg: PgTarget,
) -> None:
    # The shape of a big batch's drain: nearly every job a pending child of one batch. The
    # hook's cancel (empty unless the batch aborts) once joined its jobs by a hash over a scan
    # of every pending job, on every hook call; it finds them by primary key.
    schema = pg.schema
    batch_id = uuid7()
    conn = await asyncpg.connect(pg.dsn)
    try:
        await add_pending_children(conn, schema, batch_id, 50_000)
        await conn.execute(
            f"INSERT INTO {schema}.batches (id, queue, status) VALUES ($1, 'q', 'active')",
            batch_id,
        )
        for table in ("jobs", "batches"):
            await conn.execute(f"ANALYZE {schema}.{table}")
        plans = [
            await settle_batches_plan(conn, schema, batch_id, abort=abort)
            for abort in (False, True)
        ]
    finally:
        await conn.close()
    for plan in plans:
        found = scan_names(plan)
        assert "Seq Scan jobs" not in found, found
