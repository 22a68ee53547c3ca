"""The release's gate on PostgreSQL (migration 0019): a join's count of dependencies left is
counted down by each parent's release, and its dependencies are read only at the last one;
a graft counts only the parents that have not ended; a step with fewer dependencies than
GATED_DEPENDENCIES has no gate and is decided at each parent's end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import Start
from taskq_core.backend.protocol.workflows import (
    GATED_DEPENDENCIES,
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.states import LEASE, args, new_queue
from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    yield opened
    await opened.close()


def step(workflow_id: UUID, queue: str, name: str, *after: UUID) -> NewStep:
    metadata = {WORKFLOW_ID_KEY: str(workflow_id), WORKFLOW_STEP_KEY: name}
    return NewStep(
        args(name, queue=queue, job_id=uuid7(), metadata=metadata, waiting=bool(after)),
        name,
        after,
    )


def id_of(new: NewStep) -> UUID:
    assert new.args.job_id is not None
    return new.args.job_id


async def status(backend: PostgresBackend, new: NewStep) -> JobStatus:
    row = await backend.get(id_of(new))
    assert row is not None
    return row.status


async def left(pg: PgTarget, job_id: UUID) -> int | None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        value: int | None = await conn.fetchval(
            f"SELECT parents_left FROM {pg.schema}.workflow_waits WHERE child_id = $1", job_id
        )
        return value
    finally:
        await conn.close()


async def succeed_one(backend: PostgresBackend, queue: str) -> UUID:
    worker = uuid4()
    [job] = await backend.dispatch_batch(worker, [queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    assert await backend.mark_succeeded(job.lease(), None)
    await backend.release_workflow_steps([job.id])
    return job.id


async def test_a_join_is_counted_down_and_released_by_its_last_parent(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    workflow_id, queue = uuid7(), new_queue()
    parents = [step(workflow_id, queue, f"p{n}") for n in range(GATED_DEPENDENCIES)]
    join = step(workflow_id, queue, "join", *map(id_of, parents))
    await backend.create_workflow(NewWorkflow(workflow_id), [*parents, join])
    assert await left(pg, id_of(join)) == GATED_DEPENDENCIES
    for expected in range(GATED_DEPENDENCIES - 1, 0, -1):
        await succeed_one(backend, queue)
        assert await left(pg, id_of(join)) == expected
        assert await status(backend, join) is JobStatus.WAITING
    await succeed_one(backend, queue)
    assert await status(backend, join) is JobStatus.PENDING


async def test_a_step_with_few_dependencies_has_no_gate_and_waits_for_its_last_parent(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    workflow_id, queue = uuid7(), new_queue()
    parents = [step(workflow_id, queue, f"p{n}") for n in range(GATED_DEPENDENCIES - 1)]
    child = step(workflow_id, queue, "child", *map(id_of, parents))
    await backend.create_workflow(NewWorkflow(workflow_id), [*parents, child])
    assert await left(pg, id_of(child)) is None
    for _ in parents[1:]:
        await succeed_one(backend, queue)
        assert await status(backend, child) is JobStatus.WAITING
    await succeed_one(backend, queue)
    assert await status(backend, child) is JobStatus.PENDING


async def test_a_graft_counts_only_the_parents_still_to_end(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    workflow_id, queue = uuid7(), new_queue()
    parents = [step(workflow_id, queue, f"p{n}") for n in range(GATED_DEPENDENCIES)]
    await backend.create_workflow(NewWorkflow(workflow_id), parents)
    await succeed_one(backend, queue)
    late = step(workflow_id, queue, "late", *map(id_of, parents))
    await backend.create_workflow_steps(workflow_id, [late])
    assert await left(pg, id_of(late)) == GATED_DEPENDENCIES - 1
    for _ in parents[1:]:
        await succeed_one(backend, queue)
    assert await status(backend, late) is JobStatus.PENDING
