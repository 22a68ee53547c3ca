"""Workflow benchmark: how long ``enqueue_workflow`` takes for 10,000 steps (a fan-out, and
100 chains of 100), and how fast one `taskq worker` drains a fan-out (root -> 9,998 parallel
steps -> join) against as many plain jobs, same worker settings.

Every round loads a fresh schema. The fan-out's enqueue is timed (the ``enqueue_workflow``
call: planning, one transaction with the COPY of the steps and their edges), then the same
workflow is drained. A plain drain ends when no job waits or runs; a workflow's when its
join has ended (read by primary key: the watch must not cost the drain it times), and the
workflow must then have ended ``succeeded``. Rounds alternate plain and workflow and the
medians count, so a neighbour's burst on a shared machine hurts both alike.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from uuid import UUID

import asyncpg

from benchmarks.worker_sections import timed_drain
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol.workflows import WorkflowStatus
from taskq_core.client import JobsClient
from taskq_core.workflows import Workflow

CONCURRENCY = 16
CHAINS = 100
FreshBackend = Callable[[], AbstractAsyncContextManager[PostgresBackend]]
Settle = Callable[[PostgresBackend], Awaitable[None]]


def fan_out(steps: int) -> Workflow:
    """root -> ``steps - 2`` independent no-op steps -> join."""
    workflow = Workflow("fan-out")
    root = workflow.add("noop", {"n": 0}, name="root")
    middle = [workflow.add("noop", {"n": n}, name=f"s{n}", after=root) for n in range(steps - 2)]
    workflow.add("noop", {"n": steps}, name="join", after=middle)
    return workflow


def chains(steps: int) -> Workflow:
    """``CHAINS`` chains of ``steps / CHAINS`` no-op steps each."""
    workflow = Workflow("chains")
    for chain in range(CHAINS):
        previous = None
        for link in range(steps // CHAINS):
            after = () if previous is None else previous
            previous = workflow.add("noop", {"n": link}, name=f"c{chain}.{link}", after=after)
    return workflow


@dataclass
class WorkflowFigures:
    """Seconds per round: enqueues by shape, drains by kind (from the worker's start, and
    the jobs' own span: first claim to last finish); the load average at the end."""

    steps: int
    enqueue: dict[str, list[float]] = field(default_factory=dict)
    build: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    workflow: list[float] = field(default_factory=list)
    plain_span: list[float] = field(default_factory=list)
    workflow_span: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def median(self, seconds: list[float]) -> float:
        return statistics.median(seconds) if seconds else 0.0

    def ratio(self, plain: list[float], workflow: list[float]) -> float:
        """The workflow's drain rate as a fraction of the plain one's (medians)."""
        seconds = self.median(workflow)
        return self.median(plain) / seconds if seconds > 0 else 0.0


async def _enqueue(backend: PostgresBackend, workflow: Workflow) -> tuple[float, UUID, UUID]:
    """Seconds of ``enqueue_workflow``; the workflow's id and its last step's job id."""
    async with JobsClient(backend=backend) as client:
        started = time.perf_counter()
        run = await client.enqueue_workflow(workflow)
        seconds = time.perf_counter() - started
    return seconds, run.id, list(run.jobs.values())[-1]


async def _ended(backend: PostgresBackend, job_id: UUID) -> bool:
    job = await backend.get(job_id)
    return job is not None and job.is_terminal


async def _span(dsn: str, schema: str) -> float:
    """Seconds from the first claim to the last finish of the schema's jobs."""
    conn = await asyncpg.connect(dsn)
    try:
        seconds = await conn.fetchval(
            f"SELECT extract(epoch FROM max(finished_at) - min(claimed_at)) FROM {schema}.jobs"
        )
    finally:
        await conn.close()
    return float(seconds or 0.0)


async def _drain(backend: PostgresBackend, dsn: str, last: UUID | None) -> tuple[float, int]:
    """Seconds from the worker's start until the backlog is done (``last`` ended, when
    given); the worker's exit code."""
    done = None if last is None else lambda: _ended(backend, last)
    seconds, code, _ = await timed_drain(backend, dsn, CONCURRENCY, done)
    return seconds, code


async def _workflow_round(
    figures: WorkflowFigures, fresh_backend: FreshBackend, settle: Settle, dsn: str
) -> None:
    started = time.perf_counter()
    workflow = fan_out(figures.steps)
    figures.build.append(time.perf_counter() - started)
    async with fresh_backend() as backend:
        seconds, workflow_id, join = await _enqueue(backend, workflow)
        figures.enqueue.setdefault("fan-out", []).append(seconds)
        await settle(backend)
        seconds, code = await _drain(backend, dsn, join)
        figures.workflow_span.append(await _span(dsn, backend.schema))
        row = await backend.get_workflow(workflow_id)
        if row is None or row.status is not WorkflowStatus.SUCCEEDED:
            figures.failures.append(f"workflow {workflow_id}: {row and row.status}")
    figures.workflow.append(seconds)
    figures.exit_codes.append(code)
    async with fresh_backend() as backend:
        seconds, _, _ = await _enqueue(backend, chains(figures.steps))
        figures.enqueue.setdefault(f"{CHAINS} chains", []).append(seconds)


async def _plain_round(
    figures: WorkflowFigures, fresh_backend: FreshBackend, settle: Settle, dsn: str
) -> None:
    async with fresh_backend() as backend:
        async with JobsClient(backend=backend) as client:
            await client.enqueue_many_fast([("noop", {"n": n}) for n in range(figures.steps)])
        await settle(backend)
        seconds, code = await _drain(backend, dsn, None)
        figures.plain_span.append(await _span(dsn, backend.schema))
    figures.plain.append(seconds)
    figures.exit_codes.append(code)


async def measure(
    fresh_backend: FreshBackend, settle: Settle, dsn: str, steps: int, rounds: int
) -> WorkflowFigures:
    """``rounds`` of each kind on fresh schemas, alternating plain and workflow."""
    figures = WorkflowFigures(steps)
    for _ in range(rounds):
        await _plain_round(figures, fresh_backend, settle, dsn)
        await _workflow_round(figures, fresh_backend, settle, dsn)
    figures.load = os.getloadavg()
    return figures
