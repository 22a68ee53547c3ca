"""Cron schedules as applications make them: declared with ``@cron`` on an actor and written
at every worker start, or created and changed at run time through JobsClient's methods.

``@cron`` stacks above ``@actor`` and may be repeated; each adds a ``ScheduleSpec`` to the
actor's ``schedules``, checked when the module is imported (expression, time zone, payload).
A worker start writes them with ``sync_code_schedules``: the code owns a declared schedule's
expression, zone, payload, queue and actor, the operator owns whether it is enabled.

A schedule made through ``ScheduleMethods`` (mixed into JobsClient) lives only in the
database. Input is checked before anything is written: the expression and time zone by
``Schedule``, the payload by the actor's model when the actor is known to the client (an
ActorRef, or a name in its registry). ``run_schedule`` enqueues through the client's own
``enqueue``, so max_pending and the actor's stored queue and retry policy apply as to any job.

When a schedule fires is ``cron_timing.py``'s arithmetic; firing it is the leader's and the
backend's business (``worker/cron_loop.py``, ``ScheduleBackend``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import (
    UNSET,
    Backend,
    JobRow,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleSyncResult,
    ScheduleUpdate,
)
from taskq_core.backend.protocol.admin import Audit
from taskq_core.cron_timing import Schedule, check_timezone
from taskq_core.errors import ConfigError, PayloadValidationError, ScheduleNotFoundError
from taskq_core.names import check_name

if TYPE_CHECKING:
    # Only the client's methods name it: a worker start loads no enqueue planning.
    from taskq_core.enqueue_plan import EnqueuePlanner

# What the worker says when --until-idle meets a cron schedule (the worker guide's rule).
UNTIL_IDLE_NOTE = (
    "--until-idle is incompatible with cron-driven workloads, which enqueue jobs "
    "indefinitely: do not combine --until-idle with @cron"
)


def check_schedule(
    expression: str, timezone: str, *, expression_field: str, timezone_field: str
) -> Schedule:
    """The Schedule of ``expression`` read in ``timezone``; ConfigError naming the field
    (as the caller calls it: ``cron``, ``CRON``, ``--timezone``) when either is invalid."""
    try:
        check_timezone(timezone)
    except ValueError as exc:
        raise ConfigError(f"{timezone_field}: {exc}") from None
    try:
        return Schedule(expression, timezone)
    except ValueError as exc:
        raise ConfigError(f"{expression_field}: {exc}") from None


def upcoming_fires(record: ScheduleRecord, count: int) -> list[datetime]:
    """The schedule's next ``count`` fire times in UTC, from its stored ``next_fire_at``
    (which may lie in the past while the leader catches up); none while it is disabled."""
    if record.next_fire_at is None or count < 1:
        return []
    schedule = Schedule(record.cron, record.timezone)
    return [record.next_fire_at, *schedule.next_fires(record.next_fire_at, count - 1)]


def cron(
    expression: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    payload: BaseModel | Mapping[str, Any] | None = None,
    queue: str | None = None,
) -> Callable[[ActorRef], ActorRef]:
    """Fire the actor below on a 5-field cron ``expression`` read in ``timezone``.

    Goes above ``@actor``; an actor may carry several. ``name`` identifies the schedule
    (``taskq schedules show NAME``) and defaults to the actor's name, so an actor with more
    than one ``@cron`` names all but one. ``payload`` is every fired job's payload, checked
    by the actor's payload model when it has one; ``queue`` defaults to the actor's queue at
    fire time. Every worker start writes the schedule; an operator's ``taskq schedules
    disable`` survives it. Errors are ConfigError, raised at import.
    """

    def wrap(ref: ActorRef) -> ActorRef:
        if not isinstance(ref, ActorRef):
            raise TypeError("@cron goes above @actor (it schedules an actor)")
        schedule_name = ref.name if name is None else name
        where = f"@cron {schedule_name!r} on actor {ref.name!r}"
        check_name(schedule_name, "schedule", field=f"{where}: name")
        schedule = check_schedule(
            expression, timezone, expression_field=f"{where}: expression",
            timezone_field=f"{where}: timezone",
        )  # fmt: skip
        try:
            document = ref.dump_payload(payload)
        except PayloadValidationError as exc:
            raise ConfigError(f"{where}: payload: {exc}") from None
        if queue is not None:
            check_name(queue, "queue", field=f"{where}: queue")
        if any(spec.name == schedule_name for spec in ref.schedules):
            raise ConfigError(
                f"{where}: the actor has a schedule of that name already (give each "
                "@cron its own name=)"
            )
        # Keyword arguments, alike worker/runtime.py's _build_deps by shape only: other data.
        spec = ScheduleSpec(
            name=schedule_name,
            actor=ref.name,
            cron=schedule.expression,
            timezone=timezone,
            payload=document,
            queue=queue,
        )
        return replace(ref, schedules=(*ref.schedules, spec))

    return wrap


def declared_schedules(refs: Iterable[ActorRef]) -> list[ScheduleSpec]:
    """Every ``@cron`` schedule of a registry; ConfigError when two actors use one name."""
    specs: dict[str, ScheduleSpec] = {}
    for ref in refs:
        for spec in ref.schedules:
            other = specs.get(spec.name)
            if other is not None and other.actor != spec.actor:
                raise ConfigError(
                    f"@cron: actors {other.actor!r} and {spec.actor!r} both declare a schedule "
                    f"named {spec.name!r} (schedule names are unique)"
                )
            specs[spec.name] = spec
    return list(specs.values())


async def sync_cron_schedules(
    backend: Backend, refs: Iterable[ActorRef], *, until_idle: bool, log: Any
) -> ScheduleSyncResult:
    """Worker start: upsert the registry's ``@cron`` schedules and say what changed.

    Schedules declared in code by an earlier deploy and absent from this registry are
    reported, never deleted: a worker with a partial registry (a split deployment) cannot
    tell a removed schedule from another deployment's.
    """
    specs = declared_schedules(refs)
    result = await backend.sync_code_schedules(specs)
    if result.created or result.updated:
        log.info("schedules_synced", created=result.created, updated=result.updated)
    if result.orphaned:
        log.warning(
            "schedules_orphaned",
            schedules=result.orphaned,
            note="declared with @cron before and absent from this worker's actors; they "
            "keep firing until deleted: delete it with `taskq schedules delete NAME` (a real "
            "problem only when no deployment declares them any more)",
        )
    if until_idle and specs:
        log.warning(
            "until_idle_with_cron_schedules",
            schedules=[spec.name for spec in specs],
            note=UNTIL_IDLE_NOTE,
        )
    return result


# JobsClient's schedule methods.

Payload = BaseModel | dict[str, Any] | None


class _Client(Protocol):
    """The parts of JobsClient the schedule methods use."""

    @property
    def backend(self) -> Backend: ...

    @property
    def planner(self) -> EnqueuePlanner: ...

    async def enqueue(
        self,
        actor: ActorRef | str,
        payload: Payload = None,
        *,
        queue: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> JobRow: ...


def _schedule_name(value: str) -> str:
    return check_name(value, "schedule", field="name")


def _not_found(name: str) -> ScheduleNotFoundError:
    return ScheduleNotFoundError(f"no schedule named {name!r}")


def _optional_queue(queue: str | None) -> str | None:
    return None if queue is None else check_name(queue, "queue", field="queue")


class ScheduleMethods:
    """The schedule half of JobsClient (mixed into it; every method needs an open client)."""

    async def create_schedule(
        self: _Client,
        name: str,
        actor: ActorRef | str,
        cron: str,
        *,
        payload: Payload = None,
        timezone: str = "UTC",
        queue: str | None = None,
        audit: Audit | None = None,
    ) -> ScheduleRecord:
        """Create an enabled schedule firing ``actor`` at ``cron`` read in ``timezone``.

        ``queue`` None: the actor's queue at fire time. Raises ConfigError naming the bad
        field (``cron``, ``timezone``), PayloadValidationError when the actor's model
        rejects the payload, and ScheduleExistsError when the name is taken. ``audit`` (who
        and why) goes to the operator log with the write, as it does on every schedule write.
        """
        schedule = check_schedule(
            cron, timezone, expression_field="cron", timezone_field="timezone"
        )
        plan = await self.planner.plan(actor)
        spec = ScheduleSpec(
            name=_schedule_name(name),
            actor=plan.name,
            cron=schedule.expression,
            timezone=timezone,
            payload=plan.dump(payload),
            queue=_optional_queue(queue),
        )
        return await self.backend.create_schedule(spec, audit=audit)

    async def get_schedule(self: _Client, name: str) -> ScheduleRecord | None:
        """One schedule by name, or None."""
        return await self.backend.get_schedule(name)

    async def list_schedules(
        self: _Client, *, actor: ActorRef | str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        """Schedules by name; only one actor's, or only enabled (disabled) ones, when asked."""
        actor_name = actor.name if isinstance(actor, ActorRef) else actor
        return await self.backend.list_schedules(actor=actor_name, enabled=enabled)

    async def update_schedule(
        self: _Client,
        name: str,
        *,
        cron: str = UNSET,
        timezone: str = UNSET,
        payload: Payload = UNSET,
        queue: str | None = UNSET,
        enabled: bool = UNSET,
        actor: ActorRef | str = UNSET,
        audit: Audit | None = None,
    ) -> ScheduleRecord:
        """Change the given fields and return the schedule after; the others stay.

        A new ``cron`` or ``timezone``, or re-enabling, starts counting fire times from now
        (no catch-up for the time in between); ``enabled=False`` stops it firing. A schedule
        declared with ``@cron`` takes its code's fields back at the next worker start, but
        keeps ``enabled``. Raises ScheduleNotFoundError for an unknown name.
        """
        if enabled is not UNSET and not isinstance(enabled, bool):
            raise ConfigError("enabled: must be True or False")
        current = await self.backend.get_schedule(name)
        if current is None:
            raise _not_found(name)
        changes: dict[str, Any] = {"timezone": timezone, "enabled": enabled}
        if cron is not UNSET or timezone is not UNSET:
            # Each half is checked against the other's value after the change.
            schedule = check_schedule(
                current.cron if cron is UNSET else cron,
                current.timezone if timezone is UNSET else timezone,
                expression_field="cron",
                timezone_field="timezone",
            )
            if cron is not UNSET:
                changes["cron"] = schedule.expression
        if queue is not UNSET:
            changes["queue"] = _optional_queue(queue)
        if actor is not UNSET or payload is not UNSET:
            plan = await self.planner.plan(current.actor if actor is UNSET else actor)
            if actor is not UNSET:
                changes["actor"] = plan.name
            if payload is not UNSET:
                changes["payload"] = plan.dump(payload)
        record = await self.backend.update_schedule(name, ScheduleUpdate(**changes), audit=audit)
        if record is None:  # deleted since it was read
            raise _not_found(name)
        return record

    async def delete_schedule(
        self: _Client, name: str, *, missing_ok: bool = False, audit: Audit | None = None
    ) -> bool:
        """Delete the schedule (the jobs it made stay); True when it was deleted.

        An unknown name raises ScheduleNotFoundError, or returns False with ``missing_ok``.
        """
        deleted = await self.backend.delete_schedule(name, audit=audit)
        if not deleted and not missing_ok:
            raise _not_found(name)
        return deleted

    async def run_schedule(self: _Client, name: str, *, audit: Audit | None = None) -> JobRow:
        """Fire the schedule once now, whatever its times and whether it is enabled: one job
        of its actor and payload, in its queue (or the actor's), with metadata
        ``{"schedule": NAME, "manual": true}``, plus ``by`` and ``why`` from ``audit`` (who
        ran it). The schedule's own fire times are untouched.
        """
        record = await self.backend.get_schedule(name)
        if record is None:
            raise _not_found(name)
        metadata: dict[str, Any] = {"schedule": record.name, "manual": True}
        if audit is not None:
            metadata.update(audit.detail())
        return await self.enqueue(
            record.actor, record.payload, queue=record.queue, metadata=metadata
        )
