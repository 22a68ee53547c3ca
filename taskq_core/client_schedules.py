"""JobsClient's cron schedule methods: create, read, change, delete and fire one by hand.

A schedule made here lives only in the database (``@cron`` declares the code's; see
``taskq_core.cron_schedules``). Input is checked before anything is written: the expression
and time zone by ``Schedule``, the payload by the actor's model when the actor is known to
the client (an ActorRef, or a name in its registry). ``run_schedule`` enqueues through the
client's own ``enqueue``, so max_pending and the actor's stored queue and retry policy apply
as to any job.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import (
    UNSET,
    Backend,
    JobRow,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleUpdate,
)
from taskq_core.backend.protocol.admin import Audit
from taskq_core.cron_schedules import check_schedule
from taskq_core.enqueue_plan import EnqueuePlanner
from taskq_core.errors import ConfigError, ScheduleNotFoundError
from taskq_core.names import check_name

Payload = BaseModel | dict[str, Any] | None


class _Client(Protocol):
    """The parts of JobsClient these methods use."""

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


def _name(value: str) -> str:
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
            name=_name(name),
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

    async def run_schedule(self: _Client, name: str) -> JobRow:
        """Fire the schedule once now, whatever its times and whether it is enabled: one job
        of its actor and payload, in its queue (or the actor's), with metadata
        ``{"schedule": NAME, "manual": true}``. The schedule's own fire times are untouched.
        """
        record = await self.backend.get_schedule(name)
        if record is None:
            raise _not_found(name)
        return await self.enqueue(
            record.actor,
            record.payload,
            queue=record.queue,
            metadata={"schedule": record.name, "manual": True},
        )
