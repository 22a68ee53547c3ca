"""Cron fires under a leader killed mid-fire: three real `taskq worker` processes on one
schema, due schedules, and the leader killed with SIGKILL while its fire transaction is
inside the jobs insert. Another worker takes over and every fire time gets exactly one job.

The kill lands inside the fire for certain, not by timing: the test holds an uncommitted job
with one fire time's unique key, so the leader's insert waits on it (the unique index makes
a conflicting insert wait for the other transaction's outcome) until the test sees it
waiting, kills that worker, and rolls its own job back.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from datetime import datetime

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import ScheduleSpec, schedule_job_key
from taskq_core.cron_timing import Schedule
from taskq_core.ids import uuid7
from tests.conftest import PgTarget
from tests.e2e.test_resilience import WorkerProcess, backend, spawn, until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]
__all__ = ["backend", "spawn"]  # the fixtures this module uses from the resilience tests

DAILY = Schedule("0 3 * * *")
NAMES = [f"report-{index}" for index in range(5)]


async def leader_waiting_in_fire(conn: asyncpg.Connection, schema: str) -> bool:
    """Whether some worker's fire statement is waiting on a lock (the test's job)."""
    return bool(
        await conn.fetchval(
            """SELECT count(*) FROM pg_stat_activity
               WHERE application_name = $1 AND wait_event_type = 'Lock'
                 AND query LIKE '%unique_until%' AND query LIKE '%schedules%'""",
            f"taskq_{schema}",
        )
    )


async def registered(conn: asyncpg.Connection, schema: str, count: int) -> bool:
    """Whether ``count`` workers registered their rows."""
    return bool(await conn.fetchval(f"SELECT count(*) FROM {schema}.workers") >= count)


async def test_a_leader_killed_mid_fire_leaves_one_job_per_fire_time(
    backend: PostgresBackend, spawn: Callable[..., Awaitable[WorkerProcess]], pg: PgTarget
) -> None:
    schema = pg.schema
    for name in NAMES:
        await backend.create_schedule(ScheduleSpec(name=name, actor="echo", cron="0 3 * * *"))
    workers = [await spawn() for _ in range(3)]
    leader = await until(backend.get_leader)
    conn = await asyncpg.connect(pg.dsn)
    blocker = await asyncpg.connect(pg.dsn)
    try:
        # Every worker up before the fault: one still starting when the test ends would die
        # of its SIGTERM (-15) instead of shutting down (a loaded run saw it).
        await until(lambda: registered(conn, schema, len(workers)))
        now: datetime = await conn.fetchval("SELECT clock_timestamp()")
        fire_at = DAILY.latest_fire(now)
        held = blocker.transaction()
        await held.start()
        await blocker.execute(
            f"INSERT INTO {schema}.jobs (id, actor, unique_key) VALUES ($1, 'echo', $2)",
            uuid7(),
            schedule_job_key(NAMES[0], fire_at),
        )
        await conn.execute(f"UPDATE {schema}.schedules SET next_fire_at = $1", fire_at)
        await until(lambda: leader_waiting_in_fire(conn, schema))
        leader = await until(backend.get_leader)  # the one that leads now is the one firing
        pid = await conn.fetchval(
            f"SELECT pid FROM {schema}.workers WHERE id = $1", leader.worker_id
        )
        [victim] = [w for w in workers if w.pid == pid]
        victim.signal(signal.SIGKILL)
        await victim.wait()
        await held.rollback()  # the key is free again: the next leader's fire takes it

        async def all_fired() -> bool:
            count = await conn.fetchval(
                f"SELECT count(*) FROM {schema}.schedules WHERE last_job_id IS NOT NULL"
            )
            return bool(count == len(NAMES))

        await until(all_fired, timeout=30)
        per_key = await conn.fetch(
            f"""SELECT unique_key, count(*) AS n FROM {schema}.jobs
                WHERE unique_key IS NOT NULL GROUP BY unique_key"""
        )
        assert {r["unique_key"]: r["n"] for r in per_key} == {
            schedule_job_key(name, fire_at): 1 for name in NAMES
        }
        new_leader = await backend.get_leader()
        assert new_leader is not None and new_leader.worker_id != leader.worker_id
        due = await conn.fetchval(
            f"SELECT count(*) FROM {schema}.schedules WHERE next_fire_at <= clock_timestamp()"
        )
        assert due == 0
    finally:
        await blocker.close()
        await conn.close()
    for worker in workers:
        if worker is not victim:
            worker.signal(signal.SIGTERM)
            assert (await worker.wait())[0] == 0
