"""Workflows in memory: the workflow rows, the steps, the edges, the release and the end.

Every method awaits nothing that suspends, so each is atomic, as the Postgres part's
transaction is. A workflow's steps are the jobs whose ``metadata.workflow_id`` is its id as
text (the stored jobs are scanned, this backend being for tests). The release applies
``decide_step``, the rule the Postgres statement mirrors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any
from uuid import UUID

# Mirrors postgres/workflows.py on purpose: both implement protocol.workflows, so they import the
# same names and restate the same signatures.
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.values import JobRow
from taskq_core.backend.protocol.workflows import (
    GATED_DEPENDENCIES,
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    Decision,
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
    cancel_reason,
    decide_step,
    requires_of,
)
from taskq_core.statemachine import (
    ACTIVE_STATUSES,
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
)

from .admin import request_cancel, reset_for_retry
from .enqueue import insert_jobs
from .jsonb import as_json
from .store import PENDING, SCHEDULED, WAITING, JobRecord, MemoryStore, WorkflowRecord


class WorkflowPart(MemoryStore):
    """``create_workflow``, ``create_workflow_steps``, the release, the reads, cancel and retry."""

    # --- reads of the steps --------------------------------------------------------------------
    def _steps(self, workflow_id: UUID) -> list[JobRecord]:
        key = str(workflow_id)
        steps = [job for job in self._jobs.values() if job.metadata.get(WORKFLOW_ID_KEY) == key]
        return sorted(steps, key=lambda job: job.id)

    def _step_name(self, job_id: UUID) -> str:
        job = self._jobs.get(job_id)
        return str(job_id) if job is None else str(job.metadata.get(WORKFLOW_STEP_KEY, job_id))

    # --- inserts -------------------------------------------------------------------------------
    async def create_workflow(
        self, workflow: NewWorkflow, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[JobRow]:
        if workflow.id in self._workflows:
            raise ValueError(f"a workflow with id {workflow.id} already exists")
        jobs = insert_jobs(self, [step.args for step in steps], connection)
        record = WorkflowRecord(workflow.id, workflow.name, as_json(workflow.metadata), self._now())

        def write() -> None:
            self._workflows[workflow.id] = record
            self._add_edges(steps, jobs)

        self._on_commit(connection, write)
        return [job.snapshot() for job in jobs]

    def _on_commit(self, connection: Any, write: Any) -> None:
        """Run ``write`` now, or when ``connection``'s simulated transaction commits."""
        if connection is None:
            write()
        else:
            self._transaction_handle(connection).on_commit.append(write)

    def _add_edges(self, steps: Sequence[NewStep], jobs: Sequence[JobRecord]) -> None:
        for step, job in zip(steps, jobs, strict=True):
            self._dependencies[job.id] = list(step.after)
            for parent in step.after:
                self._dependents.setdefault(parent, []).append(job.id)
            if len(step.after) >= GATED_DEPENDENCIES:  # the gate counts those still to end
                self._parents_left[job.id] = sum(
                    self._status(parent) in ACTIVE_STATUSES for parent in step.after
                )

    def _gated(self, ended: Iterable[UUID]) -> set[UUID]:
        """Count the ended jobs' children down (workflow_waits, as the Postgres release does):
        the children to decide, those with no dependency left or one that did not succeed,
        and every child with too few dependencies for a gate."""
        due: set[UUID] = set()
        for parent in set(ended):
            status = self._status(parent)
            if status is None:
                continue
            for child in self._dependents.get(parent, ()):
                if child not in self._parents_left:
                    due.add(child)
                    continue
                self._parents_left[child] -= 1
                if self._parents_left[child] <= 0 or status is not JobStatus.SUCCEEDED:
                    due.add(child)
        return due

    async def create_workflow_steps(
        self, workflow_id: UUID, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[JobRow]:
        record = self._workflows.get(workflow_id)
        if record is None:
            raise ValueError(f"no workflow with id {workflow_id}")
        names = {step.name for step in steps}
        for job in self._steps(workflow_id):
            if job.metadata.get(WORKFLOW_STEP_KEY) in names:
                name = job.metadata[WORKFLOW_STEP_KEY]
                raise ValueError(f"workflow {workflow_id} has a step named {name!r}")
        jobs = insert_jobs(self, [step.args for step in steps], connection)

        def write() -> None:
            self._add_edges(steps, jobs)
            if record.status is not WorkflowStatus.RUNNING:
                record.status, record.finished_at = WorkflowStatus.RUNNING, None
            self._release([], [job.id for job in jobs if job.status is WAITING])

        self._on_commit(connection, write)
        return [job.snapshot() for job in jobs]

    # --- the release --------------------------------------------------------------------------
    async def release_workflow_steps(self, ended: Collection[UUID]) -> WorkflowRelease:
        return self._release(list(ended), [])

    async def release_stale_workflow_steps(self, limit: int = 1000) -> WorkflowRelease:
        # As the Postgres sweep reads them: steps a release would move, workflows with no
        # step left to end.
        running = sorted(
            w.id for w in self._workflows.values() if w.status is WorkflowStatus.RUNNING
        )
        movable = [
            job.id
            for wid in running
            for job in self._steps(wid)
            if job.status is WAITING and self._decision(job)[0] != "wait"
        ]
        ended = [
            wid
            for wid in running
            if not any(job.status in ACTIVE_STATUSES for job in self._steps(wid))
        ]
        return self._release([], movable[:limit], ended[:limit])

    def _release(
        self, ended: list[UUID], steps: list[UUID], workflows: Iterable[UUID] = ()
    ) -> WorkflowRelease:
        released = cancelled = 0
        touched: set[UUID | None] = set(workflows)
        touched.update(self._workflow_of(job_id) for job_id in ended)
        parents, candidates = ended, steps
        woke = False
        while parents or candidates:
            ids = self._gated(parents) | set(candidates)
            moved: list[UUID] = []
            jobs = [self._jobs.get(job_id) for job_id in sorted(ids)]
            # Every step of a pass is decided on the statuses before the pass, as the Postgres
            # statement reads its snapshot: a step this pass cancels counts in the next.
            decided = [(job, self._decision(job)) for job in jobs if job and job.status is WAITING]
            for job, (decision, reason) in decided:
                outcome = self._decide(job, decision, reason)
                if outcome is None:
                    continue
                touched.add(self._workflow_of(job.id))
                if outcome is JobStatus.CANCELLED:
                    moved.append(job.id)
                else:
                    released += 1
                    woke = woke or outcome is PENDING
            cancelled += len(moved)
            parents, candidates = moved, []
        if woke:
            self._wake()
        ends = tuple(self._end(wid) for wid in sorted(w for w in touched if w is not None))
        return WorkflowRelease(released, cancelled, tuple(e for e in ends if e is not None))

    def _workflow_of(self, job_id: UUID) -> UUID | None:
        job = self._jobs.get(job_id)
        if job is None or WORKFLOW_ID_KEY not in job.metadata:
            return None
        return UUID(str(job.metadata[WORKFLOW_ID_KEY]))

    def _decision(self, job: JobRecord) -> tuple[Decision, str | None]:
        """The rule's decision for one waiting step, and a cancel's reason."""
        parents = self._dependencies.get(job.id, [])
        statuses = [self._status(parent) for parent in parents]
        decision = decide_step(requires_of(job.metadata), statuses)
        if decision != "cancel":
            return decision, None
        failed = next(
            (p, s)
            for p, s in sorted(zip(parents, statuses, strict=True))
            if s is None or (s in TERMINAL_STATUSES and s is not JobStatus.SUCCEEDED)
        )
        return decision, cancel_reason(self._step_name(failed[0]), failed[1])

    def _decide(self, job: JobRecord, decision: Decision, reason: str | None) -> JobStatus | None:
        """Release or cancel one waiting step as decided; its new status (None: it waits)."""
        if decision == "wait":
            return None
        now = self._now()
        if decision == "cancel":
            self._transition(job, JobStatus.CANCELLED, detail={"reason": reason})
            job.cancel_requested_at, job.cancel_reason = now, reason
            return JobStatus.CANCELLED
        status = SCHEDULED if job.scheduled_at > now else PENDING
        self._transition(job, status, kind="released")
        job.scheduled_at = max(job.scheduled_at, now)
        if status is SCHEDULED:
            self._announce_scheduled([job])
        return status

    def _status(self, job_id: UUID) -> JobStatus | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.status

    def _end(self, workflow_id: UUID) -> tuple[UUID, WorkflowStatus] | None:
        """End a running workflow whose steps all ended."""
        record = self._workflows.get(workflow_id)
        if record is None or record.status is not WorkflowStatus.RUNNING:
            return None
        steps = self._steps(workflow_id)
        if any(job.status in ACTIVE_STATUSES for job in steps):
            return None
        if record.cancel_requested_at is not None:
            record.status = WorkflowStatus.CANCELLED
        elif all(job.status is JobStatus.SUCCEEDED for job in steps):
            record.status = WorkflowStatus.SUCCEEDED
        else:
            record.status = WorkflowStatus.FAILED
        record.finished_at = self._now()
        return workflow_id, record.status

    # --- reads --------------------------------------------------------------------------------
    def _row(self, record: WorkflowRecord) -> WorkflowRow:
        counts = Counter(job.status for job in self._steps(record.id))
        # Alike worker/execute.py's job_context by shape only: keyword fields, other data.
        return WorkflowRow(
            id=record.id,
            name=record.name,
            status=record.status,
            created_at=record.created_at,
            finished_at=record.finished_at,
            cancel_requested_at=record.cancel_requested_at,
            metadata=as_json(record.metadata),
            counts=dict(counts),
        )

    async def get_workflow(self, workflow_id: UUID) -> WorkflowRow | None:
        record = self._workflows.get(workflow_id)
        return None if record is None else self._row(record)

    async def list_workflows(self, filter: WorkflowFilter) -> list[WorkflowRow]:
        records = [
            r
            for r in self._workflows.values()
            if filter.status is None or r.status is filter.status
        ]
        records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return [self._row(r) for r in records[: filter.limit]]

    async def list_workflow_steps(self, workflow_id: UUID) -> list[WorkflowStep]:
        return [
            WorkflowStep(
                name=str(job.metadata.get(WORKFLOW_STEP_KEY, job.id)),
                job_id=job.id,
                actor=job.actor,
                queue=job.queue,
                status=job.status,
                requires=requires_of(job.metadata),
                after=tuple(self._step_name(p) for p in sorted(self._dependencies.get(job.id, []))),
                attempt=job.attempt,
                created_at=job.created_at,
                started_at=job.started_at,
                finished_at=job.finished_at,
                error_class=job.error_class,
                error_message=job.error_message,
                cancel_reason=job.cancel_reason,
            )
            for job in self._steps(workflow_id)
        ]

    async def get_upstream(self, job_id: UUID) -> dict[str, Upstream]:
        upstream = {}
        for parent in self._dependencies.get(job_id, []):
            job = self._jobs.get(parent)
            if job is None:
                continue
            upstream[self._step_name(parent)] = Upstream(
                job_id=job.id,
                status=job.status,
                result=as_json(job.result),
                error_class=job.error_class,
                error_message=job.error_message,
            )
        return upstream

    async def list_step_dependencies(self, job_id: UUID) -> list[StepDependency]:
        parents = [self._jobs.get(parent) for parent in self._dependencies.get(job_id, [])]
        found = [
            StepDependency(self._step_name(job.id), job.id, job.status)
            for job in parents
            if job is not None
        ]
        return sorted(found, key=lambda dep: (dep.name, dep.job_id))

    async def get_upstreams(self, job_ids: Collection[UUID]) -> dict[UUID, dict[str, Upstream]]:
        return {job_id: await self.get_upstream(job_id) for job_id in job_ids}

    # --- operator writes ----------------------------------------------------------------------
    async def cancel_workflow(
        self, workflow_id: UUID, reason: str | None = None, *, audit: Audit | None = None
    ) -> WorkflowCancel:
        record = self._workflows.get(workflow_id)
        if record is None:
            raise ValueError(f"no workflow with id {workflow_id}")
        if record.cancel_requested_at is None:
            record.cancel_requested_at = self._now()
        active = [job for job in self._steps(workflow_id) if job.status in ACTIVE_STATUSES]
        outcomes = Counter(
            request_cancel(self, job, reason or "workflow cancelled") for job in active
        )
        self._release([job.id for job in active], [], [workflow_id])
        done = WorkflowCancel(cancelled=outcomes["cancelled"], stopping=outcomes["requested"])
        if audit is not None:
            detail = {"cancelled": done.cancelled, "stopping": done.stopping}
            self._log_operator("workflow_cancel", str(workflow_id), audit, detail)
        return done

    async def retry_workflow(self, workflow_id: UUID, *, audit: Audit | None = None) -> int:
        record = self._workflows.get(workflow_id)
        if record is None:
            raise ValueError(f"no workflow with id {workflow_id}")
        moved = [job for job in self._steps(workflow_id) if job.status in RETRYABLE_STATUSES]
        for job in moved:
            reset_for_retry(self, job, WAITING, "workflow_retry")
        # A step released on a retried dependency's end, not yet handed out, waits for it again.
        held = {child for job in moved for child in self._dependents.get(job.id, ())}
        for child in sorted(held):
            dependent = self._jobs.get(child)
            if dependent is not None and dependent.status in (PENDING, SCHEDULED):
                self._transition(dependent, WAITING, detail={"reason": "workflow_retry"})
        if moved:
            record.status, record.finished_at, record.cancel_requested_at = (
                WorkflowStatus.RUNNING, None, None,
            )  # fmt: skip
            self._release([], [job.id for job in moved])
        if audit is not None:
            self._log_operator("workflow_retry", str(workflow_id), audit, {"retried": len(moved)})
        return len(moved)
