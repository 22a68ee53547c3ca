"""Retention: the prune (old terminal jobs to the archive, with their attempts, deleting
their events) and the archive expiry (archived jobs once the partition range of their
``expire_at`` has ended, as PostgreSQL drops that partition), the sweep locks that keep
either from running twice at once, and reads of the archive (until ``expire_at``).

A workflow's steps move with their workflow, never alone: nothing of a running workflow
moves, and an ended one moves whole once due, by the rule sql/retention.sql states (the
Postgres part's): every step still here with a status the policy prunes (in its queue when
set), and the workflow's end, its ``finished_at`` or a later step's, older than the longest
retention among its steps' statuses. Its row and edges go with it. A stray (a job whose
``workflow_id`` names no workflow) is pruned as any job.

Both sweeps work batch by batch, as PostgreSQL commits them: a batch is one step that does
not await (atomic, as one transaction is), and the sweep yields to the event loop between
batches, so other coroutines (dispatch, a second prune) run in between, as they would
between two commits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from uuid import UUID

from taskq_core.backend.protocol import (
    ArchivedJob,
    AttemptRow,
    PrunePolicy,
    PruneResult,
)
from taskq_core.backend.protocol.history import with_success_attempt
from taskq_core.backend.protocol.retention import archive_readable, archive_storage_ends
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY, WorkflowStatus, workflow_id_of
from taskq_core.statemachine import JobStatus

from .store import ArchivedRecord, JobRecord, MemoryStore, WorkflowRecord

# An ended workflow the prune moves whole: its row and every step it has in ``_jobs``.
_Due = tuple[WorkflowRecord, list[JobRecord]]


async def in_batches(
    batch_size: int, take: Callable[[], int], on_batch: Callable[[int], None] | None = None
) -> int:
    """Run ``take`` (one batch's writes, without awaiting: atomic, as a transaction is; it
    returns how many rows it touched) until a batch touches fewer than ``batch_size``,
    yielding to the event loop between batches as PostgreSQL commits between them (the
    Postgres part's ``BackendCore._in_batches``). Returns the rows touched in all."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    total = 0
    while True:
        count = take()
        total += count
        if on_batch is not None:
            on_batch(count)
        if count < batch_size:
            return total
        await asyncio.sleep(0)  # a commit point: let other work run between batches


# Mirrors postgres/retention.py on purpose: both implement protocol.retention, so each method
# restates its signature (mypy checks the match).
class RetentionPart(MemoryStore):
    """``prune_jobs``, ``expire_archive``, ``sweep_lock``, ``get_archived_job`` and
    ``get_archived_attempts``."""

    async def prune_jobs(
        self,
        policy: PrunePolicy,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> PruneResult:
        if dry_run:
            steps = self._workflow_steps()
            plain, strays = self._alone(policy, steps)
            due = [job for _, jobs in self._due_workflows(policy, steps) for job in jobs]
            found = plain + strays + due
            return PruneResult(moved=dict(Counter((job.status, job.queue) for job in found)))
        moved: Counter[tuple[JobStatus, str]] = Counter()
        batches = 0

        def archive_batch() -> int:
            # As the Postgres batch: jobs outside workflows, then due workflows (each whole)
            # in the room left, then strays in the room still left.
            nonlocal batches
            steps = self._workflow_steps()
            plain, strays = self._alone(policy, steps)
            batch = plain[: policy.batch_size]
            workflows = _within(self._due_workflows(policy, steps), policy.batch_size - len(batch))
            batch += [job for _, jobs in workflows for job in jobs]
            batch += strays[: max(policy.batch_size - len(batch), 0)]
            if batch:
                self._archive(batch, policy)
                moved.update((job.status, job.queue) for job in batch)
            self._drop_workflows(workflows)
            batches += 1
            return len(batch)

        await in_batches(policy.batch_size, archive_batch, on_batch)
        return PruneResult(moved=dict(moved), batches=batches)

    async def expire_archive(
        self, batch_size: int, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        def delete_batch() -> int:
            # Rows whose partition range has ended (PG drops that partition whole).
            now = self._now()
            expired = [
                job_id
                for job_id, archived in self._archived_jobs.items()
                if archive_storage_ends(archived.expire_at, archived.archived_at) <= now
            ][:batch_size]
            for job_id in expired:
                del self._archived_jobs[job_id]
                self._archived_attempts.pop(job_id, None)
            return len(expired)

        return await in_batches(batch_size, delete_batch, on_batch)

    def sweep_lock(self, name: str) -> AbstractAsyncContextManager[bool]:
        # Held per backend instance (PG: a session advisory lock per schema).
        return self._sweep_lock(name)

    @asynccontextmanager
    async def _sweep_lock(self, name: str) -> AsyncIterator[bool]:
        if name in self._sweep_locks:
            yield False
            return
        self._sweep_locks.add(name)
        try:
            yield True
        finally:
            self._sweep_locks.discard(name)

    async def get_archived_job(self, job_id: UUID) -> ArchivedJob | None:
        archived = self._readable(job_id)
        if archived is None:
            return None
        return ArchivedJob(archived.job.snapshot(), archived.archived_at, archived.expire_at)

    async def get_archived_attempts(self, job_id: UUID) -> list[AttemptRow]:
        archived = self._readable(job_id)
        if archived is None:
            return []
        stored = list(self._archived_attempts.get(job_id, []))
        return with_success_attempt(archived.job, stored)

    def _readable(self, job_id: UUID) -> ArchivedRecord | None:
        """The archived row of ``job_id`` while it is read back (until its expire_at)."""
        archived = self._archived_jobs.get(job_id)
        if archived is None or not archive_readable(archived.expire_at, self._now()):
            return None
        return archived

    # --- one batch ---------------------------------------------------------------------------
    def _workflow_steps(self) -> dict[UUID, list[JobRecord]]:
        """The steps in ``_jobs`` of every workflow ``_workflows`` holds, by workflow. A job
        is a step when its ``workflow_id`` is the text of such a workflow's id (the Postgres
        part matches the text too); a stray, whose ``workflow_id`` names none, is pruned alone."""
        steps: dict[UUID, list[JobRecord]] = {workflow_id: [] for workflow_id in self._workflows}
        for job in self._jobs.values():
            workflow_id = workflow_id_of(job.metadata)
            if workflow_id in steps and str(workflow_id) == job.metadata[WORKFLOW_ID_KEY]:
                steps[workflow_id].append(job)
        return steps

    def _alone(
        self, policy: PrunePolicy, steps: dict[UUID, list[JobRecord]]
    ) -> tuple[list[JobRecord], list[JobRecord]]:
        """The jobs a prune moves alone, oldest finished first: terminal jobs whose
        ``finished_at`` is older than their status's retention (in the policy's queue when
        set), split into those without a ``workflow_id`` and the strays (a ``workflow_id``
        naming no workflow: not in ``steps``). A step of a workflow never moves alone."""
        now = self._now()
        in_workflows = {job.id for jobs in steps.values() for job in jobs}
        found = [
            job
            for job in self._jobs.values()
            if job.status in policy.retention
            and job.finished_at is not None
            and job.finished_at < now - policy.retention[job.status]
            and (policy.queue is None or job.queue == policy.queue)
            and job.id not in in_workflows
        ]
        found.sort(key=_finished_order)
        plain = [job for job in found if WORKFLOW_ID_KEY not in job.metadata]
        return plain, [job for job in found if WORKFLOW_ID_KEY in job.metadata]

    def _due_workflows(self, policy: PrunePolicy, steps: dict[UUID, list[JobRecord]]) -> list[_Due]:
        """The ended workflows due by the rule (the module's docstring), oldest end first."""
        if not policy.retention:
            return []
        now = self._now()
        shortest = min(policy.retention.values())
        due: list[_Due] = []
        for record in self._workflows.values():
            if record.status is WorkflowStatus.RUNNING or record.finished_at is None:
                continue
            jobs = steps[record.id]
            if not all(
                job.status in policy.retention and policy.queue in (None, job.queue) for job in jobs
            ):
                continue
            keep = max((policy.retention[job.status] for job in jobs), default=shortest)
            ends = [record.finished_at, *(job.finished_at for job in jobs if job.finished_at)]
            if max(ends) < now - keep:
                due.append((record, jobs))
        due.sort(key=lambda pair: (pair[0].finished_at, pair[0].id))
        return due

    def _drop_workflows(self, workflows: Iterable[_Due]) -> None:
        """The rows and edges of workflows whose steps left ``_jobs``."""
        for record, jobs in workflows:
            del self._workflows[record.id]
            for job in jobs:
                self._dependencies.pop(job.id, None)
                self._dependents.pop(job.id, None)

    def _archive(self, batch: list[JobRecord], policy: PrunePolicy) -> None:
        """One atomic batch: each job leaves ``_jobs`` for the archive with its attempts, and
        its events are deleted (history a pruned job no longer needs, by design)."""
        now = self._now()
        for job in batch:
            del self._jobs[job.id]
            self._archived_jobs[job.id] = ArchivedRecord(job, now, now + policy.archive_for)
            self._archived_attempts[job.id] = self._attempts.pop(job.id, [])
        gone = {job.id for job in batch}
        self._events = [event for event in self._events if event.job_id not in gone]


def _finished_order(job: JobRecord) -> tuple[datetime, UUID]:
    """Oldest finished first, ties by id: the order a prune moves jobs in."""
    assert job.finished_at is not None  # only terminal jobs with a finished_at are prunable
    return job.finished_at, job.id


def _within(due: list[_Due], room: int) -> list[_Due]:
    """The due workflows one batch takes in the ``room`` its other jobs left: each whole,
    while the steps before it fill less than the room (at most ``room`` workflows), so one
    larger than a batch moves alone."""
    taken: list[_Due] = []
    filled = 0
    for pair in due:
        if filled >= room or len(taken) >= room:
            break
        taken.append(pair)
        filled += len(pair[1])
    return taken
