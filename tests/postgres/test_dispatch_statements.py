"""The two dispatch statements claim the same jobs, in the same order, from one snapshot.

``dispatch_plain`` repeats ``dispatch_batch``'s candidate windows and order for speed, for
the case it applies to (strict_fifo queues, no caps). This holds the copies together: on one
table state, inside one REPEATABLE READ transaction, each statement runs under a savepoint
that is rolled back, and their claims must match for every queue list, limit and oversample.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from itertools import product
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs
from tests.conftest import PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

SEED = 20261202
LEASE = timedelta(seconds=30)
QUEUE_LISTS = [
    ["a"],
    ["b"],
    ["a", "b"],
    ["c", "a", "b"],
    ["paused", "a"],
    ["a", "a", "b"],
    ["missing"],
    ["b", "missing", "c", "paused"],
    ["d"],
    ["e"],
    ["e", "d", "a"],
]
LIMITS = [1, 2, 3, 7, 16, 40, 500]
OVERSAMPLES = [1, 2]


async def _build_state(pg: PgTarget) -> None:
    """Several strict_fifo queues (one paused, one with a row, some without), actors without
    caps, priorities, ages, identity keys busy and free, keyed and unkeyed fairness, pending
    jobs not due yet and scheduled ones; queue ``d`` has more keyed heads than any window,
    and queue ``e`` 15 heads held back by a busy identity key, then free jobs."""
    rng = random.Random(SEED)
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        await backend.update_queue("b", mode="strict_fifo")
        await backend.update_queue("paused", paused=True)
        # Config rows without a cap leave the plain statement applicable.
        await backend.sync_actor_configs(
            [ActorDeclaration(actor, "a", {}, None, None, None) for actor in ("x", "y")],
            force=False,
        )
        await backend.enqueue(EnqueueArgs("w", queue="e", identity_key="busy", priority=9))
        assert len(await backend.dispatch_batch(uuid4(), ["e"], 1, LEASE)) == 1
        items = [
            EnqueueArgs(
                actor=rng.choice(["x", "y", "z"]),
                payload={"n": n},
                queue=rng.choice(["a", "a", "b", "c", "paused"]),
                priority=rng.choice([-1, 0, 0, 0, 1, 5]),
                identity_key=rng.choice([None, None, None, "k1", "k2", "k3"]),
                fairness_key=rng.choice([None, None, "t1", "t2"]),
                delay=rng.choice([None] * 9 + [timedelta(hours=1)]),
            )
            for n in range(240)
        ]
        items += [
            EnqueueArgs(
                actor=rng.choice(["x", "y"]),
                queue="d",
                identity_key=rng.choice([None, None, None, "k1"]),
                fairness_key=rng.choice(["t1", "t2"]),
            )
            for _ in range(60)
        ]
        items += [EnqueueArgs("w", queue="e", identity_key="busy", priority=9) for _ in range(15)]
        items += [EnqueueArgs("w", queue="e", priority=rng.randint(0, 5)) for _ in range(10)]
        await backend.enqueue_batch(items)
        # Some identity keys are busy: a running job of theirs holds the rest back.
        await backend.dispatch_batch(uuid4(), ["a", "b", "c"], 12, LEASE)
    finally:
        await backend.close()
    conn = await asyncpg.connect(pg.dsn)
    try:
        ids = [row["id"] for row in await conn.fetch(f"SELECT id FROM {pg.schema}.jobs")]
        # Ages that disagree with the id order, ties of age (the id decides), and pending
        # jobs that are not due yet; none within a second of now, so both statements'
        # clocks see the same jobs as due.
        shifts = [rng.choice([-7200, -600, -600, -60, -60, -5, 3600]) for _ in ids]
        await conn.execute(
            f"UPDATE {pg.schema}.jobs j"
            " SET scheduled_at = date_trunc('second', now()) + make_interval(secs => s.shift)"
            " FROM unnest($1::uuid[], $2::float8[]) AS s(id, shift)"
            " WHERE j.id = s.id AND j.status = 'pending' AND j.queue <> 'e'",
            ids,
            shifts,
        )
        await conn.execute(f"ANALYZE {pg.schema}.jobs")
    finally:
        await conn.close()


@pytest.fixture
async def snapshot(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    """A connection inside a REPEATABLE READ transaction over the built state, set up as the
    backend's pools are (generic plans, no JIT)."""
    await _build_state(pg)
    conn = await asyncpg.connect(
        pg.dsn, server_settings={"plan_cache_mode": "force_generic_plan", "jit": "off"}
    )
    transaction = conn.transaction(isolation="repeatable_read")
    await transaction.start()
    try:
        yield conn
    finally:
        await transaction.rollback()
        await conn.close()


async def _claims(
    conn: asyncpg.Connection, statement: str, args: tuple[object, ...]
) -> tuple[list[UUID], bool]:
    """The ids ``statement`` claims, in its order, and whether the plain statement applied
    (always true for ``dispatch_batch``); rolled back to before it ran."""
    savepoint = conn.transaction()
    await savepoint.start()
    try:
        records = await conn.fetch(statement, *args)
    finally:
        await savepoint.rollback()
    ids = [record["id"] for record in records if record["id"] is not None]
    applied = records[0]["plain"] if records and "plain" in records[0] else True
    return ids, applied


async def test_plain_and_general_dispatch_claim_the_same_jobs_in_the_same_order(
    pg: PgTarget, snapshot: asyncpg.Connection
) -> None:
    plain, general = render("dispatch_plain", pg.schema), render("dispatch_batch", pg.schema)
    worker = uuid4()
    cut_by_limit = 0
    for queues, limit, oversample in product(QUEUE_LISTS, LIMITS, OVERSAMPLES):
        # Bound as PostgresBackend.dispatch_batch binds them.
        args = (queues, limit, worker, LEASE, oversample)
        plain_ids, applied = await _claims(snapshot, plain, args)
        general_ids, _ = await _claims(snapshot, general, args)
        case = f"queues={queues} limit={limit} oversample={oversample}"
        assert applied, f"dispatch_plain did not apply: {case}"
        assert plain_ids == general_ids, case
        assert bool(plain_ids) == (queues != ["missing"]), case  # no vacuous agreement
        cut_by_limit += len(plain_ids) == limit
    # Many cases are cut by their limit, where the order decides which jobs are claimed.
    assert cut_by_limit >= 40


async def test_the_snapshot_orders_claims_by_priority_then_age_then_id(
    pg: PgTarget, snapshot: asyncpg.Connection
) -> None:
    # Both statements agreeing is not enough if both moved: the order itself, on the state.
    claimed, _ = await _claims(
        snapshot, render("dispatch_plain", pg.schema), (["a", "b", "c"], 500, uuid4(), LEASE, 2)
    )
    rows = await snapshot.fetch(
        f"SELECT id, priority, scheduled_at FROM {pg.schema}.jobs WHERE id = ANY($1::uuid[])",
        claimed,
    )
    by_id = {row["id"]: (-row["priority"], row["scheduled_at"], row["id"]) for row in rows}
    keys = [by_id[job_id] for job_id in claimed]
    assert len(keys) > 30
    assert keys == sorted(keys)
    assert len({key[0] for key in keys}) > 2  # several priorities took part
