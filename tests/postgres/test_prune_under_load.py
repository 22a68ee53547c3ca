"""A big prune while a real worker drains another queue: dispatch keeps going between the
prune's batches, no session waits long on a lock, and every due row moves exactly once."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from taskq_core.actors import actor
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.settings import TaskqSettings
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.conftest import PgTarget

# A prune of 50,000 rows in 20 batches takes a few seconds on a quiet machine and tens on a
# busy one: enough batches for the worker's dispatch to go on between them.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.fresh_schema,
]

DUE = 50_000
BATCH = 2_500
WAVE = 100
OLD_QUEUE = "old"
LIVE_QUEUE = "live"
# Far above any wait between the prune and the worker (they lock disjoint rows), far below
# what a prune holding a lock for a batch or for its whole run would cause.
LOCK_WAIT_BOUND = 2.0
POLICY = PrunePolicy(
    retention={JobStatus.SUCCEEDED: timedelta(days=1)},
    archive_for=timedelta(days=30),
    batch_size=BATCH,
)


@actor(queue=LIVE_QUEUE)
async def tick(payload: dict[str, Any]) -> None:
    return None


def _worker(backend: PostgresBackend) -> Worker:
    """An in-process worker on the live queue, its cadences shortened for a test."""
    settings = TaskqSettings.load(
        queues=[LIVE_QUEUE],
        max_concurrency=8,
        poll_interval=0.05,
        notify_poll_interval=0.05,
        idle_poll_interval=0.05,
        idle_settle_window=0.0,
        health_enabled=False,
    )
    return Worker(settings, {tick.name: tick}, backend=backend, install_signal_handlers=False)


async def _add_due_jobs(conn: asyncpg.Connection, schema: str) -> None:
    """DUE succeeded jobs finished two days ago, each with one attempt and two events."""
    await conn.execute(
        f"""WITH made AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, attempt, finished_at)
                SELECT gen_random_uuid(), 'work', $2, 'succeeded', 1,
                       clock_timestamp() - interval '2 days' - n * interval '1 ms'
                FROM generate_series(1, $1) AS n
                RETURNING id, finished_at
            ),
            attempts AS (
                INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)
                SELECT id, 1, 'succeeded', finished_at FROM made
            )
            INSERT INTO {schema}.job_events (job_id, kind, to_status)
            SELECT id, 'state_change', s::{schema}.job_status
            FROM made CROSS JOIN unnest(ARRAY['running', 'succeeded']) AS s""",
        DUE,
        OLD_QUEUE,
    )
    await conn.execute(f"ANALYZE {schema}.jobs")


async def _longest_lock_wait(dsn: str, schema: str, pruning: asyncio.Task[Any]) -> float:
    """The longest lock wait seen on a session working in ``schema`` while the prune runs,
    in seconds (pg_locks.waitstart, sampled)."""
    watcher = await asyncpg.connect(dsn)
    longest = 0.0
    try:
        while not pruning.done():
            waited = await watcher.fetchval(
                """SELECT COALESCE(extract(epoch FROM max(clock_timestamp() - l.waitstart)), 0)
                   FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE NOT l.granted AND a.datname = current_database()
                     AND position($1 IN a.query) > 0""",
                f"{schema}.",
            )
            longest = max(longest, float(waited))
            await asyncio.sleep(0.02)  # a sampling period, not a wait for a state
    finally:
        await watcher.close()
    return longest


async def _drain_waves(
    backend: PostgresBackend, conn: asyncpg.Connection, schema: str, pruning: asyncio.Task[Any]
) -> int:
    """Enqueue WAVE jobs on the live queue and wait until the worker finished them, again and
    again while the prune runs; return how many were enqueued."""
    enqueued = 0
    while not pruning.done() or enqueued == 0:
        await backend.enqueue_batch(
            [EnqueueArgs("tick", {"n": enqueued + n}, queue=LIVE_QUEUE) for n in range(WAVE)]
        )
        enqueued += WAVE
        async with asyncio.timeout(60):
            while await conn.fetchval(
                f"SELECT count(*) FROM {schema}.jobs WHERE queue = $1 AND status = 'succeeded'",
                LIVE_QUEUE,
            ) < enqueued:  # fmt: skip
                await asyncio.sleep(0.02)
    return enqueued


async def test_a_big_prune_in_batches_lets_a_worker_drain_another_queue(
    pg: PgTarget, conn: asyncpg.Connection
) -> None:
    await _add_due_jobs(conn, pg.schema)
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=4)
    pruner = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    worker = _worker(backend)
    running = asyncio.create_task(worker.run())
    pruning = asyncio.create_task(pruner.prune_jobs(POLICY))
    watching = asyncio.create_task(_longest_lock_wait(pg.dsn, pg.schema, pruning))
    try:
        enqueued = await _drain_waves(backend, conn, pg.schema, pruning)
        result = await pruning
        longest_wait = await watching
        worker.stop()
        assert await asyncio.wait_for(running, 30) == 0
    finally:
        for task in (pruning, watching, running):
            if not task.done():
                task.cancel()
        await asyncio.gather(pruning, watching, running, return_exceptions=True)
        await pruner.close()
        await backend.close()

    # Every due row moved once, with its attempt; its events are gone by design.
    assert (result.total, result.batches) == (DUE, DUE // BATCH + 1)
    assert result.moved == {(JobStatus.SUCCEEDED, OLD_QUEUE): DUE}
    moved = await conn.fetchrow(
        f"""SELECT
              (SELECT count(*) FROM {pg.schema}.jobs WHERE queue = $1) AS live,
              (SELECT count(*) FROM {pg.schema}.jobs_archive WHERE queue = $1) AS archived,
              (SELECT count(DISTINCT id) FROM {pg.schema}.jobs_archive) AS archived_ids,
              (SELECT count(*) FROM {pg.schema}.job_attempts_archive) AS archived_attempts,
              (SELECT count(*) FROM {pg.schema}.job_attempts a
                 JOIN {pg.schema}.jobs j ON j.id = a.job_id WHERE j.queue = $1) AS attempts,
              (SELECT count(*) FROM {pg.schema}.job_events e
                 JOIN {pg.schema}.jobs_archive a ON a.id = e.job_id) AS events""",
        OLD_QUEUE,
    )
    assert moved is not None
    assert dict(moved) == {
        "live": 0,
        "archived": DUE,
        "archived_ids": DUE,
        "archived_attempts": DUE,
        "attempts": 0,
        "events": 0,
    }

    # The live queue's jobs all ran, none was archived, and some finished while the prune was
    # between its first and its last batch (each batch stamps archived_at once).
    stamps = await conn.fetchrow(
        f"""SELECT min(archived_at) AS first, max(archived_at) AS last,
                   count(DISTINCT archived_at) AS batches
            FROM {pg.schema}.jobs_archive"""
    )
    assert stamps is not None and stamps["batches"] == DUE // BATCH
    live = await conn.fetchrow(
        f"""SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                   count(*) FILTER (WHERE finished_at > $2 AND finished_at < $3) AS during
            FROM {pg.schema}.jobs WHERE queue = $1""",
        LIVE_QUEUE,
        stamps["first"],
        stamps["last"],
    )
    assert live is not None
    assert live["succeeded"] == enqueued
    assert live["during"] > 0, "no job of the live queue finished while the prune ran"
    assert longest_wait < LOCK_WAIT_BOUND, f"a session waited {longest_wait:.2f} s on a lock"
