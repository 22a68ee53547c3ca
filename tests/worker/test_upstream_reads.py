"""Workflow steps read their dependencies once per claimed batch: one ``get_upstreams`` for
the steps among the jobs a dispatch claimed; a step whose batch read failed reads its own;
a step cancelled while it waits does not take its batch's read down with it; a step whose
actor takes no context (so cannot see ``ctx.upstream``) reads nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from types import SimpleNamespace
from typing import Any, cast
from uuid import UUID, uuid4

import pytest

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY, Upstream
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.upstream import prefetch_upstreams, read_upstream


@actor
async def reader(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    """A step that can read ``ctx.upstream``."""


@actor
async def blind(payload: dict[str, Any]) -> None:
    """A step without a context: it cannot read its dependencies."""


REGISTRY = {reader.name: reader, blind.name: blind}


def upstream_of(job_id: UUID) -> dict[str, Upstream]:
    return {"parent": Upstream(job_id=job_id, status=JobStatus.SUCCEEDED, result=str(job_id))}


class Reads:
    """The two reads a backend offers, counted; the batch read waits for ``go``."""

    def __init__(self, *, batch_fails: bool = False) -> None:
        self.batches: list[list[UUID]] = []
        self.singles: list[UUID] = []
        self.go = asyncio.Event()
        self.batch_fails = batch_fails

    async def get_upstreams(self, job_ids: Collection[UUID]) -> dict[UUID, dict[str, Upstream]]:
        self.batches.append(list(job_ids))
        await self.go.wait()
        if self.batch_fails:
            raise ConnectionResetError("lost")
        return {job_id: upstream_of(job_id) for job_id in job_ids}

    async def get_upstream(self, job_id: UUID) -> dict[str, Upstream]:
        self.singles.append(job_id)
        return upstream_of(job_id)


def claimed(*steps: bool, actor_name: str = reader.name) -> list[ActiveJob]:
    """Holdings of freshly claimed jobs of ``actor_name``: a workflow step where ``True``."""
    holdings = ActiveJobs()
    made = []
    for step in steps:
        metadata: dict[str, Any] = {WORKFLOW_ID_KEY: str(uuid4())} if step else {}
        job = SimpleNamespace(
            id=uuid4(), actor=actor_name, locked_by_worker=uuid4(), attempt=1, metadata=metadata
        )
        held, _ = holdings.claim(cast(JobRow, job), renewed_at=0.0)
        made.append(held)
    return made


async def test_the_steps_of_a_claimed_batch_share_one_read() -> None:
    reads = Reads()
    backend = cast(Backend, reads)
    first, plain, second = claimed(True, False, True)
    prefetch_upstreams(backend, [first, plain, second], REGISTRY)
    reads.go.set()
    assert await read_upstream(backend, first) == upstream_of(first.job.id)
    assert await read_upstream(backend, second) == upstream_of(second.job.id)
    assert reads.batches == [[first.job.id, second.job.id]]
    assert reads.singles == [] and plain.upstream_read is None


async def test_a_batch_without_steps_reads_nothing() -> None:
    reads = Reads()
    prefetch_upstreams(cast(Backend, reads), claimed(False, False), REGISTRY)
    assert reads.batches == []


async def test_a_step_whose_batch_read_failed_reads_its_own() -> None:
    reads = Reads(batch_fails=True)
    backend = cast(Backend, reads)
    [step] = claimed(True)
    prefetch_upstreams(backend, [step], REGISTRY)
    reads.go.set()
    assert await read_upstream(backend, step) == upstream_of(step.job.id)
    assert reads.singles == [step.job.id]


async def test_a_step_cancelled_while_it_waits_leaves_the_batch_read_to_the_others() -> None:
    reads = Reads()
    backend = cast(Backend, reads)
    first, second = claimed(True, True)
    prefetch_upstreams(backend, [first, second], REGISTRY)
    waiting = asyncio.create_task(read_upstream(backend, first))
    await asyncio.sleep(0)  # let it wait on the batch's read
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    reads.go.set()
    assert await read_upstream(backend, second) == upstream_of(second.job.id)
    assert reads.singles == []


async def test_steps_whose_actor_takes_no_context_read_nothing() -> None:
    reads = Reads()
    prefetch_upstreams(cast(Backend, reads), claimed(True, True, actor_name=blind.name), REGISTRY)
    assert reads.batches == []
