"""A big release in parts on PostgreSQL: each ``release_steps`` statement decides at most
``release_chunk`` steps and commits, the next goes on after the last step it took. The parts
must decide what one statement would: every child of a fan-out released once with one
event, a gated join counted down once, a failure's cancel run down the whole graph, the
workflow ended by the pass that finds every step ended. (The random DAGs of
tests/conformance/test_workflow_differential.py run with parts of two steps too.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import ErrorInfo, Start
from taskq_core.backend.protocol.workflows import GATED_DEPENDENCIES, NewWorkflow, WorkflowStatus
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.states import LEASE, new_queue
from tests.conftest import PgTarget
from tests.postgres.test_workflow_gate import id_of, left, status, step, succeed_one

pytestmark = pytest.mark.postgres

PART = 3
FAN_OUT = 10  # children of the root: four parts of at most three


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    opened.release_chunk = PART
    yield opened
    await opened.close()


async def released_events(pg: PgTarget, queue: str) -> dict[str, int]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        rows = await conn.fetch(
            f"SELECT j.actor, count(*) AS n FROM {pg.schema}.job_events e "
            f"JOIN {pg.schema}.jobs j ON j.id = e.job_id "
            "WHERE j.queue = $1 AND e.from_status = 'waiting' GROUP BY j.actor",
            queue,
        )
        return {r["actor"]: r["n"] for r in rows}
    finally:
        await conn.close()


async def test_a_fan_out_is_released_in_parts_each_child_once(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    workflow_id, queue = uuid7(), new_queue()
    root = step(workflow_id, queue, "root")
    children = [step(workflow_id, queue, f"c{n}", id_of(root)) for n in range(FAN_OUT)]
    # A gated join of the fan-out's first GATED_DEPENDENCIES children and the root.
    join = step(workflow_id, queue, "join", id_of(root), *map(id_of, children[:GATED_DEPENDENCIES]))
    await backend.create_workflow(NewWorkflow(workflow_id), [root, *children, join])
    assert await left(pg, id_of(join)) == GATED_DEPENDENCIES + 1

    await succeed_one(backend, queue)  # the root: its release takes four parts
    assert [await status(backend, c) for c in children] == [JobStatus.PENDING] * FAN_OUT
    assert await left(pg, id_of(join)) == GATED_DEPENDENCIES  # counted down once, not per part
    assert await status(backend, join) is JobStatus.WAITING
    events = await released_events(pg, queue)
    assert events == {f"c{n}": 1 for n in range(FAN_OUT)}

    for _ in range(FAN_OUT):
        await succeed_one(backend, queue)
    assert await status(backend, join) is JobStatus.PENDING
    await succeed_one(backend, queue)
    workflow = await backend.get_workflow(workflow_id)
    assert workflow is not None and workflow.status is WorkflowStatus.SUCCEEDED


async def test_a_failure_cancels_down_the_graph_through_parts(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    workflow_id, queue = uuid7(), new_queue()
    root = step(workflow_id, queue, "root")
    children = [step(workflow_id, queue, f"c{n}", id_of(root)) for n in range(FAN_OUT)]
    grandchildren = [step(workflow_id, queue, f"g{n}", id_of(c)) for n, c in enumerate(children)]
    await backend.create_workflow(NewWorkflow(workflow_id), [root, *children, *grandchildren])

    worker = uuid4()
    [job] = await backend.dispatch_batch(worker, [queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    error = ErrorInfo("ValueError", "boom", "Traceback: boom")
    await backend.mark_failed_or_retry(job.lease(), error, None, ran_for=0.0)
    release = await backend.release_workflow_steps([job.id])

    assert release.cancelled == 2 * FAN_OUT
    for new in (*children, *grandchildren):
        assert await status(backend, new) is JobStatus.CANCELLED
    assert release.ended == ((workflow_id, WorkflowStatus.FAILED),)
