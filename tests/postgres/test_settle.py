"""The settle statement on PostgreSQL: its retry rule is ``taskq_core.retry.retries_left``, and
it finds the rows it settles by primary key in the generic plan the worker's pool uses."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.postgres.settle import Settlement, settle_rows
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs, JobRow, Lease, Start, Success
from taskq_core.constants import DENIAL_GRID
from taskq_core.retry import retries_left
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

LEASE = timedelta(minutes=5)
# Deadlines far from now, so the database clock and this test agree on which side they are.
DEADLINES: tuple[timedelta | None, ...] = (None, timedelta(days=-1), timedelta(days=1))
GRID = list(itertools.product(("transient", "indefinite", "non_retryable"), (1, 2), DEADLINES))


async def _started_jobs(
    backend: PostgresBackend, pg: PgTarget, queue: str
) -> tuple[UUID, list[JobRow]]:
    """One running, started job per GRID case (claimed at attempt 1), deadlines set after the
    claim (dispatch would not claim a job past its deadline)."""
    await backend.enqueue_batch_fast(
        [
            EnqueueArgs("settle", {"case": n}, queue=queue, retry_kind=kind, max_attempts=most)
            for n, (kind, most, _) in enumerate(GRID)
        ]
    )
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [queue], len(GRID), LEASE)
    assert len(claimed) == len(GRID)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt) for job in claimed])
    conn = await asyncpg.connect(pg.dsn)
    try:
        for job in claimed:
            offset = GRID[job.payload["case"]][2]
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET schedule_to_close = clock_timestamp() + $2 "
                "WHERE id = $1",
                job.id,
                offset,
            )
    finally:
        await conn.close()
    return worker, [row for job in claimed if (row := await backend.get(job.id)) is not None]


def _expected(job: JobRow, now: datetime, again: JobStatus) -> JobStatus:
    left = retries_left(job.retry_kind, job.attempt, job.max_attempts, job.schedule_to_close, now)
    return again if left else JobStatus.CRASHED


async def test_release_and_reclaim_retry_exactly_when_retries_are_left(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        worker, released = await _started_jobs(backend, pg, "released")
        leases = [Lease(job.id, worker, job.attempt) for job in released]
        assert await backend.release_leases(worker, leases, reason="test") == len(GRID)
        now = await backend._pool.fetchval("SELECT clock_timestamp()")
        for job in released:
            after = await backend.get(job.id)
            assert after is not None
            assert after.status is _expected(job, now, JobStatus.SCHEDULED), GRID[
                job.payload["case"]
            ]

        _, reclaimed = await _started_jobs(backend, pg, "reclaimed")
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET lock_expires_at = clock_timestamp() - interval '1s' "
                "WHERE queue = 'reclaimed'"
            )
        finally:
            await conn.close()
        zero = timedelta(0)
        assert await backend.reclaim_expired_leases(zero, zero) == len(GRID)
        now = await backend._pool.fetchval("SELECT clock_timestamp()")
        for job in reclaimed:
            after = await backend.get(job.id)
            assert after is not None
            assert after.status is _expected(job, now, JobStatus.PENDING), GRID[job.payload["case"]]
    finally:
        await backend.close()


def _index_names(plan: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(plan["Node Type"], plan.get("Index Name") or plan.get("Relation Name", ""))]
    for child in plan.get("Plans", []):
        found += _index_names(child)
    return found


def _array(values: list[Any], sql_type: str) -> str:
    """An array literal of test-made values (ids, numbers, fixed words)."""
    items = ", ".join("NULL" if v is None else f"'{v}'" for v in values)
    return f"ARRAY[{items}]::{sql_type}[]"


@pytest.mark.slow
async def test_settle_finds_its_rows_by_primary_key(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        await backend.enqueue_batch_fast([EnqueueArgs("bulk", {}) for _ in range(20_000)])
        worker = uuid4()
        claimed = await backend.dispatch_batch(worker, ["default"], 50, LEASE)
    finally:
        await backend.close()
    n = len(claimed)
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(f"VACUUM ANALYZE {pg.schema}.jobs")
        await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
        statements = {
            "settle": (
                "uuid[], integer[], uuid[], text[], interval[], boolean[], text[], interval[], "
                "float8[], text[], text[], text[], text[], boolean[], text, integer, integer, "
                "text, float8",
                [
                    _array([job.id for job in claimed], "uuid"),
                    _array([job.attempt for job in claimed], "integer"),
                    _array([worker] * n, "uuid"),
                    _array(["succeeded"] * n, "text"),
                    *["NULL"] * 4,
                    _array([0.0] * n, "float8"),
                    *["NULL"] * 5,
                    "'unheard'",
                    "10",
                    "3",  # TASKQ_POISON_RECLAIMS
                    "'unheard'",  # the events channel
                    "0.05",  # DENIAL_GRID
                ],
            ),
            "settle_succeeded": (
                "uuid, uuid[], integer[], text[], interval[], float8[], text",
                [
                    f"'{worker}'",
                    _array([job.id for job in claimed], "uuid"),
                    _array([job.attempt for job in claimed], "integer"),
                    *["NULL"] * 2,
                    _array([0.0] * n, "float8"),
                    "'unheard'",
                ],
            ),
            "settle_denied": (
                "uuid, uuid[], integer[], interval[], text[], text, float8",
                [
                    f"'{worker}'",
                    _array([job.id for job in claimed], "uuid"),
                    _array([job.attempt for job in claimed], "integer"),
                    _array(["5 minutes"] * n, "interval"),
                    _array(["rate_limit:api"] * n, "text"),
                    "'unheard'",
                    "0.05",
                ],
            ),
        }
        for name, (types, literals) in statements.items():
            await conn.execute(f"PREPARE {name}({types}) AS {render(name, pg.schema)}")
            nodes: list[tuple[str, str]] = []
            for _ in range(6):  # past the custom plans a prepared statement tries first
                tx = conn.transaction()
                await tx.start()
                raw = await conn.fetchval(
                    f"EXPLAIN (FORMAT JSON) EXECUTE {name}({', '.join(literals)})"
                )
                await tx.rollback()
                nodes = _index_names(json.loads(raw)[0]["Plan"])
            assert ("Seq Scan", "jobs") not in nodes, (name, nodes)
            assert all(index != "jobs_running_actor_idx" for _, index in nodes), (name, nodes)
            assert any(index == "jobs_pkey" for _, index in nodes), (name, nodes)
    finally:
        await conn.close()


# Columns the clock stamps: compared through their relations, not their values.
_JOB_TIMES = ("finished_at", "updated_at", "started_at", "result_expires_at")


async def _settled_state(
    conn: asyncpg.Connection, schema: str, ids: list[UUID]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Jobs, attempts and events of ``ids`` as a caller would compare them (clock-free)."""
    jobs = []
    for record in await conn.fetch(
        f"SELECT * FROM {schema}.jobs WHERE id = ANY($1) ORDER BY id", ids
    ):
        row = {k: v for k, v in record.items() if k not in _JOB_TIMES}
        finished, expires = record["finished_at"], record["result_expires_at"]
        row["ttl"] = None if expires is None else expires - finished
        row["started"] = record["started_at"] is not None
        jobs.append(row)
    attempts = [
        {k: v for k, v in r.items() if k not in ("id", "started_at", "finished_at")}
        | {"timed": r["duration_ms"] is not None}
        for r in await conn.fetch(
            f"SELECT * FROM {schema}.job_attempts WHERE job_id = ANY($1) ORDER BY job_id", ids
        )
    ]
    for attempt in attempts:
        attempt.pop("duration_ms")
    events = [
        {k: v for k, v in r.items() if k not in ("id", "occurred_at")}
        for r in await conn.fetch(
            f"SELECT * FROM {schema}.job_events WHERE job_id = ANY($1) ORDER BY job_id, id", ids
        )
    ]
    return jobs, attempts, events


async def test_the_success_statement_settles_as_settle_does(pg: PgTarget) -> None:
    """settle_succeeded is settle's success branch written out for speed: from one snapshot,
    both leave the same jobs, attempts and events (results, TTLs, unrecorded starts, lost
    leases)."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        await backend.sync_actor_configs(
            [ActorDeclaration("stored_ttl", "same", {}, None, None, timedelta(hours=1))],
            force=False,
        )
        await backend.enqueue_batch_fast(
            [
                EnqueueArgs("stored_ttl", {}, queue="same"),
                EnqueueArgs("own_ttl", {}, queue="same", result_ttl=timedelta(minutes=5)),
                EnqueueArgs("fallback", {}, queue="same"),
                EnqueueArgs("plain", {}, queue="same"),
                EnqueueArgs("lost", {}, queue="same"),
            ]
        )
        worker = uuid4()
        claimed = await backend.dispatch_batch(worker, ["same"], 5, LEASE)
        assert len(claimed) == 5
        by_actor = {job.actor: job for job in claimed}
        await backend.mark_started_many(worker, [Start(by_actor["stored_ttl"].id, 1)])
        successes = [
            Success(by_actor["stored_ttl"].id, 1, '{"a": [1, 2]}', None, 1.5),
            Success(by_actor["own_ttl"].id, 1, None, timedelta(days=1), 0.25),
            Success(by_actor["fallback"].id, 1, '"text"', timedelta(days=1), 0.0),
            Success(by_actor["plain"].id, 1, "null", None, 2.0),
            Success(by_actor["lost"].id, 2, "1", None, 0.0),  # not the lease's attempt
        ]
        ids = sorted(job.id for job in claimed)
        seen = []
        async with backend._pool.acquire() as conn:
            for statement in ("settle_succeeded", "settle"):
                tx = conn.transaction()
                await tx.start()
                try:
                    if statement == "settle":
                        settled = await settle_rows(
                            backend,
                            conn,
                            [
                                Settlement(
                                    s.job_id,
                                    s.attempt,
                                    worker,
                                    "succeeded",
                                    result_json=s.result_json,
                                    fallback_result_ttl=s.fallback_result_ttl,
                                    ran_for=s.ran_for,
                                )
                                for s in successes
                            ],
                        )
                    else:
                        settled = await backend._settle_successes(conn, worker, successes)
                    state = await _settled_state(conn, pg.schema, ids)
                finally:
                    await tx.rollback()
                seen.append((sorted(r["id"] for r in settled), state))
        assert seen[0] == seen[1]
        assert len(seen[0][0]) == 4  # the lost lease settled nothing in either
    finally:
        await backend.close()


async def test_the_denial_statement_settles_as_settle_does(pg: PgTarget) -> None:
    """settle_denied is settle's rate-limit denial written out for speed: from one snapshot,
    it and settle (for the rows it leaves: a cancel requested, a deadline the delay passes,
    a start on the row) leave the same jobs, attempts and events; a claim event stored at the
    claim is not written twice, and a lease lost writes nothing."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        cases = ("plain", "claim_stored", "cancel", "deadline", "started", "lost")
        await backend.enqueue_batch_fast(
            [EnqueueArgs(case, {}, queue="same") for case in cases[:-1]]
            + [EnqueueArgs("lost", {}, queue="same")]
        )
        worker = uuid4()
        claimed = await backend.dispatch_batch(worker, ["same"], len(cases), LEASE)
        by_actor = {job.actor: job for job in claimed}
        await backend.mark_started_many(worker, [Start(by_actor["started"].id, 1)])
        ids = sorted(job.id for job in claimed)
        async with backend._pool.acquire() as conn:
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET cancel_requested_at = clock_timestamp()"
                " WHERE id = $1",
                by_actor["cancel"].id,
            )
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET schedule_to_close = clock_timestamp()"
                " + interval '1 minute' WHERE id = $1",
                by_actor["deadline"].id,
            )
            await conn.execute(
                f"INSERT INTO {pg.schema}.job_events (job_id, occurred_at, kind, from_status,"
                " to_status, worker_id) SELECT id, claimed_at, 'state_change', 'pending',"
                f" 'running', locked_by_worker FROM {pg.schema}.jobs WHERE id = $1",
                by_actor["claim_stored"].id,
            )
            delay = timedelta(minutes=5)
            denials = [(job.id, 2 if job.actor == "lost" else job.attempt) for job in claimed]
            settlements = [
                Settlement(
                    job_id, attempt, worker, "retry_after", delay=delay,
                    consume_budget=False, reason="rate_limit:api",
                )
                for job_id, attempt in denials
            ]  # fmt: skip
            seen = []
            for statement in ("settle_denied", "settle"):
                tx = conn.transaction()
                await tx.start()
                try:
                    if statement == "settle":
                        settled = await settle_rows(backend, conn, settlements)
                        covered = set()
                    else:
                        records = await conn.fetch(
                            render("settle_denied", pg.schema),
                            worker,
                            [job_id for job_id, _ in denials],
                            [attempt for _, attempt in denials],
                            [delay] * len(denials),
                            ["rate_limit:api"] * len(denials),
                            "unheard",
                            DENIAL_GRID.total_seconds(),
                        )
                        covered = {r["id"] for r in records if r["covered"]}
                        left = [s for s in settlements if s.job_id not in covered]
                        settled = [*records, *await settle_rows(backend, conn, left)]
                    state = await _settled_state(conn, pg.schema, ids)
                    # Due again on the grid, from the clock's reading plus the delay.
                    due = await conn.fetch(
                        f"SELECT scheduled_at, updated_at FROM {pg.schema}.jobs"
                        " WHERE id = ANY($1) AND status = 'scheduled' ORDER BY id",
                        ids,
                    )
                finally:
                    await tx.rollback()
                grid = DENIAL_GRID.total_seconds()
                for row in due:
                    late = row["scheduled_at"] - row["updated_at"] - delay
                    assert timedelta(0) <= late < DENIAL_GRID
                    assert round(row["scheduled_at"].timestamp() / grid, 4) % 1 == 0
                jobs = [{k: v for k, v in j.items() if k != "scheduled_at"} for j in state[0]]
                seen.append(
                    (sorted({r["id"] for r in settled}), jobs, state[1], state[2], len(due))
                )
                if statement == "settle_denied":
                    names = {job.id: job.actor for job in claimed}
                    assert sorted(names[i] for i in covered) == ["claim_stored", "plain"]
        assert seen[0] == seen[1]
        assert len(seen[0][0]) == 5  # the lost lease settled nothing in either
    finally:
        await backend.close()
