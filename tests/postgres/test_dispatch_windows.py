"""How much the Postgres dispatch statements read: the bounded windows of candidates.

The protocol only promises that a call may claim fewer than ``limit`` jobs while more are due
and that later calls claim the rest. How many rows each statement reads to decide is
Postgres's own business, pinned here (see the header of ``sql/dispatch.sql``): a shared window
of ``limit * oversample`` rows, at least 16; a capped actor's window of its residual *
oversample rows; per-cohort windows in round_robin queues, shared out evenly past 256 rows;
and the budget of 128 cohorts past which a round_robin queue falls back to the shared window.

Each test hides a free job behind heads that identity serialization filters out (one job of
their key already runs), so whether the free job is claimed shows where the window ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs, JobRow
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)
Connect = Callable[..., Awaitable[PostgresBackend]]


@pytest.fixture
async def connect(pg: PgTarget) -> AsyncIterator[Connect]:
    """Open PostgresBackends on the test's schema (closed afterwards)."""
    opened: list[PostgresBackend] = []

    async def open_backend(**options: Any) -> PostgresBackend:
        backend = await PostgresBackend.connect(pg.dsn, pg.schema, **options)
        opened.append(backend)
        return backend

    yield open_backend
    for backend in opened:
        await backend.close()


async def dispatch(backend: PostgresBackend, queue: str, limit: int) -> list[JobRow]:
    return await backend.dispatch_batch(uuid4(), [queue], limit, LEASE)


def payloads(rows: list[JobRow]) -> list[object]:
    return [row.payload["n"] for row in rows]


async def hold_key(backend: PostgresBackend, queue: str, **fields: Any) -> JobRow:
    """A running job of actor ``a`` with identity key ``k``: later ``k`` jobs are blocked."""
    job = await backend.enqueue(
        EnqueueArgs("a", {"n": "held"}, queue=queue, identity_key="k", **fields)
    )
    [held] = await dispatch(backend, queue, 1)
    assert held.id == job.id
    return held


def blocked(queue: str, count: int, **fields: Any) -> list[EnqueueArgs]:
    """``count`` jobs of the held key, at a higher priority than the free job."""
    return [
        EnqueueArgs("a", {"n": f"blocked{n}"}, queue=queue, identity_key="k", priority=1, **fields)
        for n in range(count)
    ]


def free(queue: str, **fields: Any) -> EnqueueArgs:
    """A job nothing holds back, ranked after every blocked one."""
    return EnqueueArgs("a", {"n": "free"}, queue=queue, **fields)


# --- the shared window (strict_fifo; both statements) ----------------------------------------
@pytest.mark.parametrize("plain_dispatch", [True, False], ids=["plain", "general"])
@pytest.mark.parametrize(
    ("limit", "oversample", "heads", "reaches_free"),
    [
        (1, 2, 15, True),  # the 16-row floor: 15 blocked heads and the free job
        (1, 2, 16, False),
        (10, 2, 19, True),  # limit * oversample = 20 rows
        (10, 2, 20, False),
        (10, 3, 29, True),  # limit * oversample = 30 rows
        (10, 3, 30, False),
    ],
)
async def test_a_strict_fifo_queue_reads_limit_times_oversample_rows_and_at_least_16(
    connect: Connect,
    plain_dispatch: bool,
    limit: int,
    oversample: int,
    heads: int,
    reaches_free: bool,
) -> None:
    backend = await connect(dispatch_oversample=oversample, plain_dispatch=plain_dispatch)
    await hold_key(backend, "q")
    await backend.enqueue_batch([*blocked("q", heads), free("q")])
    assert payloads(await dispatch(backend, "q", limit)) == (["free"] if reaches_free else [])


@pytest.mark.parametrize("plain_dispatch", [True, False], ids=["plain", "general"])
async def test_a_job_past_the_window_is_claimed_by_a_later_call(
    connect: Connect, plain_dispatch: bool
) -> None:
    backend = await connect(plain_dispatch=plain_dispatch)
    held = await hold_key(backend, "q")
    await backend.enqueue_batch([*blocked("q", 16), free("q")])
    assert await dispatch(backend, "q", 1) == []  # due, but behind 16 blocked heads
    assert await backend.mark_succeeded(held.lease(), None)
    assert payloads(await dispatch(backend, "q", 1)) == ["blocked0"]
    assert payloads(await dispatch(backend, "q", 1)) == ["free"]  # now inside the window


# --- a capped actor's own window ------------------------------------------------------------
@pytest.mark.parametrize(("oversample", "reaches_free"), [(1, False), (2, True)])
async def test_a_capped_actor_reads_its_residual_times_oversample_rows(
    connect: Connect, oversample: int, reaches_free: bool
) -> None:
    backend = await connect(dispatch_oversample=oversample)
    await hold_key(backend, "q")
    await backend.enqueue_batch([*blocked("q", 1), free("q")])
    await backend.sync_actor_configs([ActorDeclaration("a", "q", {}, 2, None, None)], force=False)
    # One slot left for the actor: its window is 1 * oversample rows, the blocked head first.
    assert payloads(await dispatch(backend, "q", 5)) == (["free"] if reaches_free else [])


# --- round_robin cohorts ---------------------------------------------------------------------
@pytest.mark.parametrize(("heads", "reaches_free"), [(1, True), (2, False)])
async def test_a_round_robin_cohort_reads_limit_times_oversample_rows(
    connect: Connect, heads: int, reaches_free: bool
) -> None:
    backend = await connect()
    await backend.update_queue("rr", mode="round_robin")
    await hold_key(backend, "rr")
    # Unkeyed jobs are one cohort; limit 1 * oversample 2 = 2 rows of it (no 16-row floor).
    await backend.enqueue_batch([*blocked("rr", heads), free("rr")])
    assert payloads(await dispatch(backend, "rr", 1)) == (["free"] if reaches_free else [])


@pytest.mark.parametrize(("heads", "reaches_free"), [(127, True), (128, False)])
async def test_round_robin_cohorts_share_256_rows_evenly_when_their_windows_exceed_it(
    connect: Connect, heads: int, reaches_free: bool
) -> None:
    backend = await connect()
    await backend.update_queue("rr", mode="round_robin")
    await hold_key(backend, "rr", fairness_key="deep")
    await backend.enqueue_batch(
        [
            *blocked("rr", heads, fairness_key="deep"),
            free("rr", fairness_key="deep"),
            EnqueueArgs("a", {"n": "other"}, queue="rr", fairness_key="other"),
        ]
    )
    # limit 100 * oversample 2 = 200 rows per cohort; 2 cohorts * 200 > 256, so each reads
    # max(ceil(200 / 2) + 1, 256 / 2) = 128 rows.
    claimed = sorted(map(str, payloads(await dispatch(backend, "rr", 100))))
    assert claimed == (["free", "other"] if reaches_free else ["other"])


async def test_round_robin_past_128_cohorts_falls_back_to_the_shared_window(
    connect: Connect,
) -> None:
    backend = await connect()
    await backend.update_queue("q", mode="round_robin")
    await backend.enqueue_batch(
        [EnqueueArgs("a", {"n": f"deep{n}"}, queue="q", fairness_key="deep") for n in range(20)]
        + [EnqueueArgs("a", {"n": f"t{n}"}, queue="q", fairness_key=f"t{n:03}") for n in range(128)]
    )
    # 129 cohorts: one shared window (16 rows here) in FIFO order, ranked by cohort.
    assert payloads(await dispatch(backend, "q", 3)) == ["deep0", "deep1", "deep2"]
    # Within the budget, every cohort's head competes.
    await backend.update_queue("q2", mode="round_robin")
    await backend.enqueue_batch(
        [EnqueueArgs("a", {"n": f"deep{n}"}, queue="q2", fairness_key="deep") for n in range(10)]
        + [
            EnqueueArgs("a", {"n": f"t{n}"}, queue="q2", fairness_key=f"t{n:03}")
            for n in range(127)
        ]
    )
    assert payloads(await dispatch(backend, "q2", 3)) == ["deep0", "t0", "t1"]


async def test_round_robin_counts_jobs_without_a_key_as_one_cohort_of_the_budget(
    connect: Connect,
) -> None:
    backend = await connect()
    for queue, others in (("q", 126), ("q2", 127)):
        await backend.update_queue(queue, mode="round_robin")
        await backend.enqueue_batch(
            [
                EnqueueArgs("a", {"n": f"deep{n}"}, queue=queue, fairness_key="deep")
                for n in range(20)
            ]
            + [EnqueueArgs("a", {"n": "none"}, queue=queue)]
            + [
                EnqueueArgs("a", {"n": f"t{n}"}, queue=queue, fairness_key=f"t{n:03}")
                for n in range(others)
            ]
        )
    # 128 cohorts, the unkeyed one included: every cohort's head competes.
    assert payloads(await dispatch(backend, "q", 3)) == ["deep0", "none", "t0"]
    # 129: the shared window, which the deep cohort fills.
    assert payloads(await dispatch(backend, "q2", 3)) == ["deep0", "deep1", "deep2"]
