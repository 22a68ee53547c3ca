"""``ctx.workflow.add`` reads the workflow's steps once per running step, not once per add
(a map over 2,000 items took 40 s, each add reading every step added before it), and still
sees what other steps added meanwhile: an ``after=`` naming such a step reads them again, and
a name another step took is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest

from taskq_core import Workflow
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus
from taskq_core.workflows import WorkflowHandle


class CountingBackend(InMemoryBackend):
    """The memory backend, counting how often a workflow's steps are listed."""

    listed = 0

    async def list_workflow_steps(self, workflow_id: UUID) -> Any:
        self.listed += 1
        return await super().list_workflow_steps(workflow_id)


@pytest.fixture
async def client() -> AsyncIterator[JobsClient]:
    async with JobsClient(backend=CountingBackend()) as opened:
        yield opened


async def handles(client: JobsClient) -> tuple[UUID, WorkflowHandle, WorkflowHandle]:
    """A running workflow of two steps, and the handle each of them gets."""
    wf = Workflow("map")
    wf.add("noop", {}, name="split")
    wf.add("noop", {}, name="other")
    run = await client.enqueue_workflow(wf)
    return (
        run.id,
        WorkflowHandle(run.id, "split", client.backend, client.planner.registry),
        WorkflowHandle(run.id, "other", client.backend, client.planner.registry),
    )


async def test_a_map_and_its_join_read_the_steps_once(client: JobsClient) -> None:
    workflow_id, split, _ = await handles(client)
    parts = [await split.add("noop", {"n": n}, name=f"part-{n}") for n in range(50)]
    await split.add("noop", {}, name="total", after=parts)
    backend = client.backend
    assert isinstance(backend, CountingBackend) and backend.listed == 1
    steps = {s.name: s for s in await client.workflow_steps(workflow_id)}
    assert steps["total"].after == tuple(f"part-{n}" for n in range(50))
    assert steps["total"].status is JobStatus.WAITING


async def test_steps_another_step_added_are_seen(client: JobsClient) -> None:
    workflow_id, split, other = await handles(client)
    await split.add("noop", {}, name="first")
    await other.add("noop", {}, name="elsewhere")
    # after= names a step this handle has not seen: it reads the steps again.
    await split.add("noop", {}, name="after-it", after="elsewhere")
    steps = {s.name: s for s in await client.workflow_steps(workflow_id)}
    assert steps["after-it"].after == ("elsewhere",)
    # A name the other step took is refused, though this handle had not seen it.
    await other.add("noop", {}, name="taken")
    with pytest.raises(ConfigError, match="taken"):
        await split.add("noop", {}, name="taken")
