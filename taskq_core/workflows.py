"""Workflows as users build them: ``Workflow`` and its step handles, the running workflow's
handle a step gets (``ctx.workflow``), and the planning both share.

``Workflow.add`` only records a step (its actor, payload, name, dependencies and enqueue
options); nothing is checked against the database until ``JobsClient.enqueue_workflow`` plans
the steps: each becomes an ordinary job's EnqueueArgs through the client's planner (payload
validated, actor resolved), with a time-ordered id fixed up front so the edges can name it,
and ``metadata.workflow_id`` / ``metadata.workflow_step`` set. A step with dependencies is
inserted waiting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol.workflows import (
    REQUIRES,
    WORKFLOW_ID_KEY,
    WORKFLOW_REQUIRES_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    Requires,
)
from taskq_core.capacity import CapacityCache
from taskq_core.enqueue_plan import EnqueueItem, EnqueuePlanner
from taskq_core.errors import ConfigError
from taskq_core.ids import uuid7

if TYPE_CHECKING:
    from taskq_core.backend.protocol import Backend, JobRow

# How long a graft's planner trusts stored actor rows and max_pending (a client's default).
GRAFT_CAPACITY_TTL = 5.0


@dataclass(frozen=True, slots=True)
class Step:
    """A step handle: what ``wf.add`` returns and ``after=`` takes (or the step's name)."""

    name: str


# Alike supervisor/schema.py's WorkgroupConfig by shape only: a frozen record's fields, other data.
@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step as added: its job, its name, what it waits for and on what terms."""

    item: EnqueueItem
    name: str
    after: tuple[str, ...]
    requires: Requires


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """What ``enqueue_workflow`` returns: the workflow's id and each step's job id."""

    id: UUID
    jobs: dict[str, UUID] = field(default_factory=dict)


def _actor_name(actor: ActorRef | str) -> str:
    return actor.name if isinstance(actor, ActorRef) else actor


# What ``after=`` takes: a step, a step's name, or a sequence of them (``add_many``'s steps
# among them: a step may wait for a whole group).
After = Step | str | Sequence[Any]


def _names(after: After) -> tuple[str, ...]:
    if isinstance(after, (Step, str)):
        return (after.name if isinstance(after, Step) else after,)
    if not isinstance(after, Sequence):
        raise ConfigError(f"after= takes steps or step names, got {type(after).__name__}")
    return tuple(name for dependency in after for name in _names(dependency))


def step_spec(
    taken: Mapping[str, object],
    actor: ActorRef | str,
    payload: BaseModel | dict[str, Any] | None,
    *,
    name: str | None,
    after: After,
    requires: str,
    options: dict[str, Any],
) -> StepSpec:
    """``wf.add``'s arguments checked: a new name, known dependencies, known terms."""
    step_name = name if name is not None else _actor_name(actor)
    if not step_name:
        raise ConfigError("a step needs a name")
    if step_name in taken:
        hint = "" if name is not None else " (give name= to add an actor twice)"
        raise ConfigError(f"the workflow has a step named {step_name!r} already{hint}")
    if requires not in REQUIRES:
        raise ConfigError(f"requires must be one of {', '.join(REQUIRES)}, got {requires!r}")
    names = _names(after)
    unknown = [n for n in names if n not in taken]
    if unknown:
        raise ConfigError(f"step {step_name!r} waits for unknown step {unknown[0]!r}")
    if options.get("on_conflict", "raise") != "raise":
        raise ConfigError("a workflow step takes on_conflict='raise' only")
    try:
        item = EnqueueItem(actor, payload, **options)
    except TypeError as exc:
        raise ConfigError(f"step {step_name!r}: {exc}") from None
    return StepSpec(item, step_name, names, requires)  # type: ignore[arg-type]


class Workflow:
    """A set of steps with dependencies, enqueued at once by ``client.enqueue_workflow``.

    ``add(actor, payload, *, name=None, after=(), requires="succeeded", **options)`` adds a
    step (a job of ``actor`` with any enqueue option: queue, priority, delay or run_at,
    unique_key, identity_key, ...) and returns its handle. ``requires="succeeded"``: the
    step runs when every dependency succeeded and is cancelled when one failed for good or
    was cancelled; ``"finished"``: it runs once every dependency ended, whatever the outcome.
    A step's delay counts from the workflow's enqueue: released earlier, it waits until then.
    """

    def __init__(self, name: str | None = None, *, metadata: dict[str, Any] | None = None) -> None:
        self.name = name
        self.metadata = dict(metadata or {})
        self.steps: dict[str, StepSpec] = {}

    def add(
        self,
        actor: ActorRef | str,
        payload: BaseModel | dict[str, Any] | None = None,
        *,
        name: str | None = None,
        after: After = (),
        requires: Requires = "succeeded",
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        **options: Any,
    ) -> Step:
        # WorkflowHandle.add repeats this signature on purpose: a step added to a running
        # workflow takes what a planned one does.
        options.update(delay=delay, run_at=run_at)
        spec = step_spec(
            self.steps, actor, payload, name=name, after=after, requires=requires, options=options
        )
        self.steps[spec.name] = spec
        return Step(spec.name)

    def add_many(
        self,
        actor: ActorRef | str,
        payloads: Sequence[BaseModel | dict[str, Any] | None],
        *,
        name: str | None = None,
        after: After = (),
        requires: Requires = "succeeded",
        **options: Any,
    ) -> list[Step]:
        """A map over a list: one step of ``actor`` per payload, named ``name[i]`` (``name``
        defaults to the actor's), each with ``add``'s other arguments; returns their
        handles, which ``after=`` takes as one (a step that waits for the whole group)."""
        prefix = name if name is not None else _actor_name(actor)
        return [
            self.add(
                actor, payload, name=f"{prefix}[{i}]", after=after, requires=requires, **options
            )
            for i, payload in enumerate(payloads)
        ]

    def __len__(self) -> int:
        return len(self.steps)


async def plan_steps(
    planner: EnqueuePlanner,
    workflow_id: UUID,
    specs: Sequence[StepSpec],
    known: Mapping[str, UUID],
) -> list[NewStep]:
    """The steps as the backend inserts them: validated EnqueueArgs with fixed ids and the
    workflow's metadata, and the job ids each waits for (``known``: steps stored before)."""
    prepared = await planner.prepare([spec.item for spec in specs])
    await planner.check_capacity(prepared.counts)
    ids = dict(known)
    ids.update((spec.name, uuid7()) for spec in specs)
    steps = []
    for spec, args in zip(specs, prepared, strict=True):
        metadata = {
            **args.metadata,
            WORKFLOW_ID_KEY: str(workflow_id),
            WORKFLOW_STEP_KEY: spec.name,
        }
        if spec.requires != "succeeded":
            metadata[WORKFLOW_REQUIRES_KEY] = spec.requires
        args = replace(args, job_id=ids[spec.name], metadata=metadata, waiting=bool(spec.after))
        steps.append(NewStep(args, spec.name, tuple(ids[name] for name in spec.after)))
    return steps


class WorkflowHandle:
    """``ctx.workflow`` inside a step: the workflow's ``id``, and ``add`` (``wf.add``'s
    signature) which adds steps to the running workflow at once; ``after=`` names any of
    its steps (this one included: the new step then waits for it to end)."""

    def __init__(
        self, workflow_id: UUID, step: str, backend: Backend, registry: dict[str, ActorRef]
    ) -> None:
        self.id = workflow_id
        self.step = step
        self._backend = backend
        self._registry = registry
        # The workflow's steps (name -> job id) as last read, plus those added here since:
        # read again only when after= names a step not in it (another step added it).
        # A name taken meanwhile elsewhere is refused by the backend's insert.
        self._known: dict[str, UUID] | None = None

    def _planner(self) -> EnqueuePlanner:
        """A planner as a client's (made per graft: a step that grafts nothing pays none)."""
        planner = EnqueuePlanner(lambda: self._backend, self._registry, GRAFT_CAPACITY_TTL)
        planner.capacity = CapacityCache(
            self._backend, ttl=GRAFT_CAPACITY_TTL, monotonic=time.monotonic
        )
        return planner

    async def _steps(self, after: After) -> dict[str, UUID]:
        names = _names(after)
        if self._known is None or any(name not in self._known for name in names):
            steps = await self._backend.list_workflow_steps(self.id)
            self._known = {s.name: s.job_id for s in steps}
        return self._known

    async def add(
        self,
        actor: ActorRef | str,
        payload: BaseModel | dict[str, Any] | None = None,
        *,
        name: str | None = None,
        after: After = (),
        requires: Requires = "succeeded",
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        **options: Any,
    ) -> Step:
        # Workflow.add's signature, repeated on purpose: the contract gives both one.
        known = await self._steps(after)
        options.update(delay=delay, run_at=run_at)
        spec = step_spec(
            known, actor, payload, name=name, after=after, requires=requires, options=options
        )
        steps = await plan_steps(self._planner(), self.id, [spec], known)
        try:
            await self._backend.create_workflow_steps(self.id, steps)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        [added] = steps
        if added.args.job_id is not None:  # always: plan_steps fixes every step's id
            known[spec.name] = added.args.job_id
        return Step(spec.name)


def run_of(workflow_id: UUID, rows: Sequence[JobRow]) -> WorkflowRun:
    """The WorkflowRun of the steps' rows."""
    return WorkflowRun(workflow_id, {str(row.metadata[WORKFLOW_STEP_KEY]): row.id for row in rows})
