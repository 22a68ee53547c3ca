"""What workflows need of a backend: the workflow row, its steps' edges, the release rule.

A workflow is a set of jobs (its steps) with dependencies. Every step is an ordinary job whose
metadata carries ``workflow_id`` and ``workflow_step`` (its name); a step with dependencies
is inserted ``waiting``, a status dispatch never reads, and its ``scheduled_at`` holds the
start its enqueue options asked for. The edges (parent job, child job) live in their own table.

Release: when a step ends, each waiting step that depends on it is decided again by
``decide_step`` (the one rule both backends apply): released (``pending``, or ``scheduled``
when its start is still ahead), cancelled (a dependency failed for good or was cancelled,
for a step that requires success), or left waiting. A cancelled step ends too, so its own
dependents are decided in the same call. The decision is a guarded write (only a ``waiting``
row moves), so two calls for two parents that ended together release a step once; the
worker's hook calls ``release_workflow_steps`` after the step's terminal write committed,
and the leader's ``release_stale_workflow_steps`` catches what a lost hook, an operator or a
leader sweep left behind. A workflow ends (``succeeded`` when every step did, ``cancelled``
after ``cancel_workflow``, else ``failed``) when its last step ends.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.values import EnqueueArgs
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

# The metadata keys every step's job carries (the contract's names), and the one a step that
# runs whatever its dependencies' outcomes carries.
WORKFLOW_ID_KEY = "workflow_id"
WORKFLOW_STEP_KEY = "workflow_step"
WORKFLOW_REQUIRES_KEY = "workflow_requires"
# A step with this many dependencies or more gets a count-down gate (workflow_waits): each of
# its parents' ends counts it down, and its dependencies are read once, when none is left. A
# step with fewer has them read at each parent's end, which costs less than the gate's row
# (a fan-out's 10,000 single-parent steps wrote and updated 10,000 gates).
GATED_DEPENDENCIES = 8

Requires = Literal["succeeded", "finished"]
REQUIRES: tuple[Requires, ...] = ("succeeded", "finished")
Decision = Literal["release", "cancel", "wait"]


class WorkflowStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


def decide_step(requires: Requires, parents: Iterable[JobStatus | None]) -> Decision:
    """What becomes of a waiting step whose dependencies are in ``parents`` (None: a
    dependency that is gone, which counts as ended without success)."""
    statuses = list(parents)
    if requires == "finished":
        return "release" if all(s is None or s in TERMINAL_STATUSES for s in statuses) else "wait"
    if any(
        s is None or (s in TERMINAL_STATUSES and s is not JobStatus.SUCCEEDED) for s in statuses
    ):
        return "cancel"
    return "release" if all(s is JobStatus.SUCCEEDED for s in statuses) else "wait"


def cancel_reason(step: str, status: JobStatus | None) -> str:
    """The cancel reason of a step whose dependency ``step`` ended as ``status``."""
    ended = "is gone" if status is None else status.value
    return f"dependency {step} {ended}"


def requires_of(metadata: Mapping[str, Any]) -> Requires:
    """A step's ``requires`` as its job's metadata holds it."""
    return "finished" if metadata.get(WORKFLOW_REQUIRES_KEY) == "finished" else "succeeded"


def workflow_id_of(metadata: Mapping[str, Any]) -> UUID | None:
    """The workflow a job is a step of, from its metadata; None outside one."""
    value = metadata.get(WORKFLOW_ID_KEY)
    if value is None:
        return None
    try:
        return UUID(str(value))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NewStep:
    """One step to insert: its job (``args.job_id`` fixed, metadata carrying the workflow
    keys), its name and the job ids it waits for (none: inserted as a plain enqueue would)."""

    args: EnqueueArgs
    name: str
    after: tuple[UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    id: UUID
    name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """A workflow and its steps' counts by status."""

    id: UUID
    name: str | None
    status: WorkflowStatus
    created_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    metadata: dict[str, Any]
    counts: dict[JobStatus, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def is_finished(self) -> bool:
        return self.status is not WorkflowStatus.RUNNING


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One step of a workflow as operators read it: its job's summary and its dependencies."""

    name: str
    job_id: UUID
    actor: str
    queue: str
    status: JobStatus
    requires: Requires
    after: tuple[str, ...]
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_class: str | None
    error_message: str | None
    cancel_reason: str | None


@dataclass(frozen=True, slots=True)
class Upstream:
    """A dependency's outcome as a step reads it (``ctx.upstream[name]``)."""

    job_id: UUID
    status: JobStatus
    result: Any = None
    error_class: str | None = None
    error_message: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status is JobStatus.SUCCEEDED


@dataclass(frozen=True, slots=True)
class StepDependency:
    """A dependency of a step as an operator reads it: its step name, its job, that job's
    status now (``list_step_dependencies``; no result, unlike ``Upstream``)."""

    name: str
    job_id: UUID
    status: JobStatus


@dataclass(frozen=True, slots=True)
class WorkflowRelease:
    """What one release pass did: steps made due, steps cancelled, workflows that ended."""

    released: int = 0
    cancelled: int = 0
    ended: tuple[tuple[UUID, WorkflowStatus], ...] = ()

    def __add__(self, other: WorkflowRelease) -> WorkflowRelease:
        return WorkflowRelease(
            self.released + other.released,
            self.cancelled + other.cancelled,
            self.ended + other.ended,
        )


@dataclass(frozen=True, slots=True)
class WorkflowFilter:
    status: WorkflowStatus | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class WorkflowCancel:
    """``cancel_workflow``'s answer: steps cancelled at once, running ones asked to stop."""

    cancelled: int
    stopping: int


@runtime_checkable
class WorkflowBackend(Protocol):
    async def create_workflow(
        self, workflow: NewWorkflow, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[Any]:
        """Insert the workflow's row, every step's job (``waiting`` when it has dependencies,
        else as ``enqueue_batch`` inserts it) and the edges, in one transaction (the
        caller's ``connection`` when given); the steps' JobRows in order. Every ``after``
        names a step of the same call. An invalid step stores nothing."""
        ...

    async def create_workflow_steps(
        self, workflow_id: UUID, steps: Sequence[NewStep], *, connection: Any = None
    ) -> list[Any]:
        """Add steps to a workflow (``ctx.workflow.add``); ``after`` may name its existing
        steps and the new ones. A step whose dependencies already allow it is decided at
        once; a workflow that had ended runs again. ValueError for an unknown workflow or a
        name already taken."""
        ...

    async def release_workflow_steps(self, ended: Collection[UUID]) -> WorkflowRelease:
        """Decide again every waiting step that depends on one of the ``ended`` jobs (and,
        through the steps this cancels, their dependents); end the workflows whose steps
        all ended. Idempotent: calling it twice, or for a job that did not end, changes
        nothing more."""
        ...

    async def release_stale_workflow_steps(self, limit: int = 1000) -> WorkflowRelease:
        """The leader's safety sweep: decide the waiting steps of running workflows (up to
        ``limit``) and end running workflows whose steps all ended."""
        ...

    async def get_workflow(self, workflow_id: UUID) -> WorkflowRow | None:
        """One workflow with its steps' counts, or None."""
        ...

    async def list_workflows(self, filter: WorkflowFilter) -> list[WorkflowRow]:
        """Workflows newest first, with their steps' counts."""
        ...

    async def list_workflow_steps(self, workflow_id: UUID) -> list[WorkflowStep]:
        """A workflow's steps in the order they were added."""
        ...

    async def get_upstream(self, job_id: UUID) -> dict[str, Upstream]:
        """The outcome of each dependency of step ``job_id``, by step name (one read), its
        result included: what ``ctx.upstream`` holds."""
        ...

    async def list_step_dependencies(self, job_id: UUID) -> list[StepDependency]:
        """The dependencies of step ``job_id`` still in the jobs table, in name order, with
        their statuses and without their results (one read; none for a job without any)."""
        ...

    async def get_upstreams(self, job_ids: Collection[UUID]) -> dict[UUID, dict[str, Upstream]]:
        """``get_upstream`` of many steps in one read: each id's dependencies by step name
        (``{}`` for a job without dependencies or outside a workflow)."""
        ...

    async def cancel_workflow(
        self, workflow_id: UUID, reason: str | None = None, *, audit: Audit | None = None
    ) -> WorkflowCancel:
        """Cancel every step not yet ended (running ones cooperatively); the workflow ends
        ``cancelled`` once its last step ended. ValueError for an unknown workflow. With
        ``audit`` (an operator's write), an operator_log row ``workflow_cancel`` records
        who, why and how many steps."""
        ...

    async def retry_workflow(self, workflow_id: UUID, *, audit: Audit | None = None) -> int:
        """Retry the workflow's failed, crashed and cancelled steps: each waits again and is
        released once its dependencies allow it (at once when they already do); the workflow
        runs again. A step released on one of their ends (``requires="finished"``) that no
        worker took yet waits again too, so it never starts beside a retried dependency. How
        many steps were retried. ValueError for an unknown workflow. With ``audit``, an
        operator_log row ``workflow_retry`` records who and how many steps."""
        ...


__all__ = [
    "REQUIRES",
    "WORKFLOW_ID_KEY",
    "WORKFLOW_REQUIRES_KEY",
    "WORKFLOW_STEP_KEY",
    "Decision",
    "NewStep",
    "NewWorkflow",
    "Requires",
    "StepDependency",
    "Upstream",
    "WorkflowBackend",
    "WorkflowCancel",
    "WorkflowFilter",
    "WorkflowRelease",
    "WorkflowRow",
    "WorkflowStatus",
    "WorkflowStep",
    "cancel_reason",
    "decide_step",
    "requires_of",
    "workflow_id_of",
]
