"""Actors of the workflow kill -9 storm: every body records itself in the ledger table of the
test's schema (``LEDGER``) on a connection of its own, its start and its end dated by the
database's clock (the one the job rows are stamped with), so a body a SIGKILL cut short
keeps its start row. A body never fails: it sleeps its ``ms`` and returns what it read of
its dependencies.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any, cast

import asyncpg

from taskq_core import JobContext, RetryPolicy, actor
from taskq_core.actors import ActorRef
from taskq_core.constants import validate_identifier

LEDGER = "workflow_ledger"
LEDGER_DDL = """
CREATE TABLE {table} (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    step text NOT NULL,
    attempt integer NOT NULL,
    worker_id uuid NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz
)"""
# A killed body is retried soon: the storm measures the release, not backoff.
RETRY = RetryPolicy(max_attempts=20, base=timedelta(milliseconds=50), jitter=0)


def ledger_table(schema: str) -> str:
    return f"{validate_identifier(schema)}.{LEDGER}"


async def _step(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> dict[str, Any]:
    table = ledger_table(os.environ["TASKQ_SCHEMA_NAME"])
    conn = await asyncpg.connect(os.environ["TASKQ_PG_DSN"])
    try:
        body = await conn.fetchval(
            f"INSERT INTO {table} (job_id, step, attempt, worker_id, pid, started_at) "
            "VALUES ($1, $2, $3, $4, $5, clock_timestamp()) RETURNING id",
            ctx.job_id,
            ctx.metadata["workflow_step"],
            ctx.attempt,
            ctx.worker_id,
            os.getpid(),
        )
        await asyncio.sleep(payload["ms"] / 1000)
        await conn.execute(f"UPDATE {table} SET ended_at = clock_timestamp() WHERE id = $1", body)
    finally:
        await conn.close()
    return {name: up.status.value for name, up in sorted(ctx.upstream.items())}


step = cast(ActorRef, actor(name="wf_step", retry=RETRY)(_step))
registry = [step]
