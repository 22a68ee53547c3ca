"""Workflows on PostgreSQL: the workflow rows, the steps (COPY, as a batch), the edges, the
release and the workflow's end (sql/workflows.sql).

A release is one ``release_steps`` statement per pass: the first decides the waiting
children of the jobs that ended, each next one the children of the steps the one before
cancelled (a failure's cancel runs down the graph), and each ends the workflows whose steps
all ended. Each statement takes a fresh snapshot after it waited for its row locks, so the
pass that runs after the last parent's write committed sees every parent ended.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

# Mirrors memory/workflows.py on purpose: both implement protocol.workflows, so they import the same
# names and restate the same signatures.
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.values import JobRow
from taskq_core.backend.protocol.workflows import (
    GATED_DEPENDENCIES,
    NewStep,
    NewWorkflow,
    StepDependency,
    Upstream,
    WorkflowCancel,
    WorkflowFilter,
    WorkflowRelease,
    WorkflowRow,
    WorkflowStatus,
    WorkflowStep,
    requires_of,
)
from taskq_core.statemachine import ACTIVE_STATUSES, JobStatus

from . import bulk
from .core import BackendCore, one_on
from .enqueue import copy_jobs

# Statuses as the statements take them.
_ACTIVE = sorted(status.value for status in ACTIVE_STATUSES)


def _workflow(record: Any) -> WorkflowRow:
    counts = json.loads(record["counts"]) if record["counts"] else {}
    return WorkflowRow(
        id=record["id"],
        name=record["name"],
        status=WorkflowStatus(record["status"]),
        created_at=record["created_at"],
        finished_at=record["finished_at"],
        cancel_requested_at=record["cancel_requested_at"],
        metadata=json.loads(record["metadata"]),
        counts={JobStatus(status): n for status, n in counts.items()},
    )


def _step(record: Any) -> WorkflowStep:
    return WorkflowStep(
        name=record["name"],
        job_id=record["id"],
        actor=record["actor"],
        queue=record["queue"],
        status=JobStatus(record["status"]),
        requires=requires_of({"workflow_requires": record["requires"]}),
        after=tuple(record["after"]),
        attempt=record["attempt"],
        created_at=record["created_at"],
        started_at=record["started_at"],
        finished_at=record["finished_at"],
        error_class=record["error_class"],
        error_message=record["error_message"],
        cancel_reason=record["cancel_reason"],
    )


def _upstream(record: Any) -> Upstream:
    return Upstream(
        job_id=record["id"],
        status=JobStatus(record["status"]),
        result=None if record["result"] is None else json.loads(record["result"]),
        error_class=record["error_class"],
        error_message=record["error_message"],
    )


# The most steps one release statement decides: a 10,000-step fan-out's first thousand are
# pending after a tenth of the whole release (docs/workflows.md, "A big release in parts").
RELEASE_CHUNK = 1000


class WorkflowPart(BackendCore):
    """``create_workflow``, ``create_workflow_steps``, the release, the reads, cancel and retry."""

    release_chunk: int = RELEASE_CHUNK

    @asynccontextmanager
    async def _transaction_on(self, connection: Any) -> AsyncIterator[Any]:
        """The caller's connection (the transaction is the caller's), else a pooled one in a
        transaction of its own: a workflow's writes commit together either way."""
        if connection is not None:
            yield connection
            return
        async with self._pool.acquire() as conn, conn.transaction():
            yield conn

    async def create_workflow(
        self, workflow: NewWorkflow, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[JobRow]:
        async with self._transaction_on(connection) as conn:
            created = await conn.fetchval(
                self._queries["create_workflow"],
                workflow.id,
                workflow.name,
                bulk.dumps(workflow.metadata),
            )
            if created is None:
                raise ValueError(f"a workflow with id {workflow.id} already exists")
            return await self._insert_steps(conn, workflow.id, steps)

    async def _insert_steps(
        self, conn: Any, workflow_id: UUID, steps: Sequence[NewStep]
    ) -> list[JobRow]:
        """The steps' jobs (one COPY, as a batch) and their edges, on ``conn``."""
        jobs: list[JobRow] = []
        await copy_jobs(self, [step.args for step in steps], conn, jobs)
        edges = [
            (parent, job.id) for step, job in zip(steps, jobs, strict=True) for parent in step.after
        ]
        if edges:
            parents, children = zip(*edges, strict=True)
            await conn.execute(
                self._queries["insert_workflow_edges"],
                workflow_id,
                list(parents),
                list(children),
                GATED_DEPENDENCIES,
            )
        return jobs

    async def create_workflow_steps(
        self, workflow_id: UUID, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[JobRow]:
        async with self._transaction_on(connection) as conn:
            names = [step.name for step in steps]
            record = await conn.fetchrow(self._queries["lock_workflow"], workflow_id, names)
            if record is None:
                raise ValueError(f"no workflow with id {workflow_id}")
            if record["taken"]:
                raise ValueError(f"workflow {workflow_id} has a step named {record['taken'][0]!r}")
            jobs = await self._insert_steps(conn, workflow_id, steps)
            if record["status"] != WorkflowStatus.RUNNING:
                await conn.execute(self._queries["reopen_workflow"], workflow_id, False)
            waiting = [job.id for job in jobs if job.status is JobStatus.WAITING]
            if waiting:  # dependencies that ended already decide now
                await self._release(conn, [], waiting)
            return jobs

    # --- the release --------------------------------------------------------------------------
    async def release_workflow_steps(self, ended: Collection[UUID]) -> WorkflowRelease:
        if not ended:
            return WorkflowRelease()
        # No transaction around the statements (the hook's call per step end: a BEGIN and a
        # COMMIT are two round trips more): each is atomic, and what one left undone when a
        # later one failed (a cancel's dependents, a workflow's end) is the leader's sweep's.
        async with self._pool.acquire() as conn:
            return await self._release(conn, list(ended), [])

    async def release_stale_workflow_steps(self, limit: int = 1000) -> WorkflowRelease:
        async with self._pool.acquire() as conn, conn.transaction():
            record = await one_on(conn, self._queries["stale_workflow_steps"], limit)
            return await self._release(conn, [], list(record["steps"]), list(record["workflows"]))

    async def _release(
        self,
        conn: Any,
        ended: list[UUID],
        steps: list[UUID],
        workflows: list[UUID] | None = None,
    ) -> WorkflowRelease:
        """Decide the waiting children of ``ended`` and the waiting ``steps``, then the
        children of every step this cancels; each pass also ends the workflows it touched
        whose steps all ended (``release_steps``: one statement per pass). A pass decides
        at most ``release_chunk`` steps: a bigger one goes on after the last it took. On a
        connection outside a transaction (the worker's hook) each part commits on its own,
        so a fan-out's first steps run while the rest are released, and a crash between
        parts leaves those to the leader's sweep; inside one (a graft, a cancel, a retry,
        the sweep) the parts commit together."""
        released = cancelled = 0
        touched = set(workflows or ())
        ends: list[tuple[UUID, WorkflowStatus]] = []
        cascade: list[UUID] = []
        parents, candidates = ended, steps
        resume: list[UUID] = []
        after: UUID | None = None
        while True:
            records = await conn.fetch(
                self._queries["release_steps"],
                parents,
                candidates,
                self._wake_channel,
                self._events_channel,
                sorted(touched),
                self.release_chunk,
                resume,
                after,
            )
            last: UUID | None = None
            for r in records:
                if r["decision"] == "ended":
                    ends.append((r["workflow_id"], WorkflowStatus(r["status"])))
                elif r["decision"] == "more":
                    last = r["id"]
                else:
                    touched.add(r["workflow_id"])
                    if r["decision"] == "cancelled":
                        cascade.append(r["id"])
                    else:
                        released += 1
            if last is not None:  # a part: the next goes on after its last step
                resume, after = sorted({*resume, *parents}), last
                parents, candidates = [], [c for c in candidates if c > last]
                continue
            cancelled += len(cascade)
            if not cascade:
                return WorkflowRelease(released, cancelled, tuple(ends))
            parents, candidates, resume, after, cascade = cascade, [], [], None, []

    # --- reads --------------------------------------------------------------------------------
    async def get_workflow(self, workflow_id: UUID) -> WorkflowRow | None:
        record = await self._pool.fetchrow(self._queries["get_workflow"], workflow_id)
        return None if record is None else _workflow(record)

    async def list_workflows(self, filter: WorkflowFilter) -> list[WorkflowRow]:
        status = None if filter.status is None else filter.status.value
        records = await self._pool.fetch(self._queries["list_workflows"], status, filter.limit)
        return [_workflow(record) for record in records]

    async def list_workflow_steps(self, workflow_id: UUID) -> list[WorkflowStep]:
        records = await self._pool.fetch(self._queries["list_workflow_steps"], workflow_id)
        return [_step(record) for record in records]

    async def get_upstream(self, job_id: UUID) -> dict[str, Upstream]:
        records = await self._pool.fetch(self._queries["get_upstream"], job_id)
        return {r["name"]: _upstream(r) for r in records}

    async def get_upstreams(self, job_ids: Collection[UUID]) -> dict[UUID, dict[str, Upstream]]:
        found: dict[UUID, dict[str, Upstream]] = {job_id: {} for job_id in job_ids}
        if found:
            records = await self._pool.fetch(self._queries["get_upstreams"], list(found))
            for r in records:
                found[r["child_id"]][r["name"]] = _upstream(r)
        return found

    async def list_step_dependencies(self, job_id: UUID) -> list[StepDependency]:
        records = await self._pool.fetch(self._queries["list_step_dependencies"], job_id)
        return [StepDependency(r["name"], r["id"], JobStatus(r["status"])) for r in records]

    # --- operator writes ----------------------------------------------------------------------
    async def cancel_workflow(
        self, workflow_id: UUID, reason: str | None = None, *, audit: Audit | None = None
    ) -> WorkflowCancel:
        async with self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchrow(self._queries["request_workflow_cancel"], workflow_id) is None:
                raise ValueError(f"no workflow with id {workflow_id}")
            ids = [
                r["id"]
                for r in await conn.fetch(self._queries["workflow_step_ids"], workflow_id, _ACTIVE)
            ]
            record = await one_on(
                conn,
                self._queries["cancel_where"],
                None, None, None, ids, len(ids), reason or "workflow cancelled",
                self._events_channel,
            )  # fmt: skip
            await self._release(conn, ids, [], [workflow_id])
            done = WorkflowCancel(cancelled=record["cancelled"], stopping=record["requested"])
            if audit is not None:
                detail = {"cancelled": done.cancelled, "stopping": done.stopping}
                await self._log_operator(conn, "workflow_cancel", str(workflow_id), audit, detail)
        return done

    async def retry_workflow(self, workflow_id: UUID, *, audit: Audit | None = None) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchrow(self._queries["lock_workflow"], workflow_id, []) is None:
                raise ValueError(f"no workflow with id {workflow_id}")
            moved = [
                r["id"]
                for r in await conn.fetch(self._queries["retry_workflow_steps"], workflow_id)
            ]
            if moved:
                await conn.execute(self._queries["hold_released_dependents"], moved)
                await conn.execute(self._queries["reopen_workflow"], workflow_id, True)
                await self._release(conn, [], moved)
            if audit is not None:
                detail = {"retried": len(moved)}
                await self._log_operator(conn, "workflow_retry", str(workflow_id), audit, detail)
        return len(moved)
