"""JobsClient's workflow methods: enqueue (also in the caller's transaction), read, wait,
cancel and retry.

``enqueue_workflow`` plans every step (``workflows.plan_steps``: payloads validated, ids
fixed) before the first insert, then the backend stores the workflow's row, its steps and
their edges in one transaction: a workflow is stored whole or not at all.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol
from uuid import UUID

from taskq_core.backend.protocol import Backend
from taskq_core.backend.protocol.workflows import (
    NewWorkflow,
    WorkflowCancel,
    WorkflowFilter,
    WorkflowRow,
    WorkflowStatus,
    WorkflowStep,
)
from taskq_core.enqueue_plan import EnqueuePlanner
from taskq_core.errors import ConfigError, JobNotFoundError
from taskq_core.ids import parse_uuid, uuid7
from taskq_core.obs.metrics import count_sent
from taskq_core.obs.spans import producer_span
from taskq_core.polling import poll_until
from taskq_core.workflows import Workflow, WorkflowRun, plan_steps, run_of

DEFAULT_WAIT_POLL = 0.05


# Each client_* mixin states what it needs of JobsClient, so none imports another; this one
# repeats client_batches.py's on purpose (protocol/history.py's SucceededJob is alike by
# shape only).
class _Client(Protocol):
    """The parts of JobsClient these methods use."""

    @property
    def backend(self) -> Backend: ...

    @property
    def planner(self) -> EnqueuePlanner: ...


def workflow_uuid(value: UUID | str) -> UUID:
    """A workflow id as given (a UUID or its text); ConfigError otherwise."""
    ident = parse_uuid(value)
    if ident is None:
        raise ConfigError(f"workflow id: {value!r} is not a UUID")
    return ident


class WorkflowMethods:
    """The workflow half of JobsClient (mixed into it; the client must be open)."""

    async def enqueue_workflow(
        self: _Client, workflow: Workflow, *, connection: Any = None
    ) -> WorkflowRun:
        """Insert every step of ``workflow`` in one transaction (the caller's
        ``connection`` when given); returns ``WorkflowRun(id, jobs={step name: job id})``.

        Steps without dependencies are due as plain enqueues are; the others wait until
        theirs allow them. An invalid step raises (PayloadValidationError, ConfigError, ...)
        and nothing of the workflow is stored."""
        if not isinstance(workflow, Workflow) or not workflow.steps:
            raise ConfigError("enqueue_workflow takes a Workflow with at least one step")
        workflow_id = uuid7()
        specs = list(workflow.steps.values())
        steps = await plan_steps(self.planner, workflow_id, specs, {})
        new = NewWorkflow(workflow_id, workflow.name, workflow.metadata)
        first = steps[0].args
        with producer_span(first.queue, first.actor) as (trace_id, span_id):
            traced = [
                replace(step, args=replace(step.args, trace_id=trace_id, span_id=span_id))
                for step in steps
            ]
            rows = await self.backend.create_workflow(new, traced, connection=connection)
        count_sent((row.queue, row.actor) for row in rows)
        return run_of(workflow_id, rows)

    async def get_workflow(self: _Client, workflow_id: UUID | str) -> WorkflowRow | None:
        """The workflow with its steps' counts by status, or None."""
        return await self.backend.get_workflow(workflow_uuid(workflow_id))

    async def list_workflows(
        self: _Client, *, status: WorkflowStatus | str | None = None, limit: int = 50
    ) -> list[WorkflowRow]:
        """Workflows newest first."""
        wanted = None if status is None else WorkflowStatus(status)
        return await self.backend.list_workflows(WorkflowFilter(wanted, limit))

    async def workflow_steps(self: _Client, workflow_id: UUID | str) -> list[WorkflowStep]:
        """The workflow's steps in the order they were added."""
        return await self.backend.list_workflow_steps(workflow_uuid(workflow_id))

    async def wait_for_workflow(
        self: _Client,
        workflow_id: UUID | str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_WAIT_POLL,
    ) -> WorkflowRow:
        """Wait until the workflow ended (every step did) and return its row: its status
        (succeeded, failed or cancelled) and its steps' counts. TimeoutError after
        ``timeout``; JobNotFoundError for an unknown workflow."""
        # Alike client.py's JobsClient.wait by shape only: each polls its own row through
        # poll_until, with its own end test.
        ident = workflow_uuid(workflow_id)
        return await poll_until(
            lambda: self.backend.get_workflow(ident),
            lambda row: row.is_finished,
            missing=f"no workflow with id {workflow_id}",
            timeout=timeout,
            poll_interval=poll_interval,
        )

    async def cancel_workflow(
        self: _Client, workflow_id: UUID | str, *, reason: str | None = None
    ) -> WorkflowCancel:
        """Cancel every step not yet ended: waiting ones at once, running ones
        cooperatively; the workflow ends ``cancelled`` once its last step ended."""
        try:
            return await self.backend.cancel_workflow(workflow_uuid(workflow_id), reason)
        except ValueError as exc:
            raise JobNotFoundError(str(exc)) from None

    async def retry_workflow(self: _Client, workflow_id: UUID | str) -> int:
        """Retry the failed, crashed and cancelled steps (each runs again once its
        dependencies allow it, and its dependents after it); how many were retried."""
        try:
            return await self.backend.retry_workflow(workflow_uuid(workflow_id))
        except ValueError as exc:
            raise JobNotFoundError(str(exc)) from None
