"""Cron schedules as applications declare them: ``@cron`` on an actor, and the worker-start
upsert of every schedule a registry declares.

``@cron`` stacks above ``@actor`` and may be repeated; each adds a ``ScheduleSpec`` to the
actor's ``schedules``, checked when the module is imported (expression, time zone, payload).
A worker start writes them with ``sync_code_schedules``: the code owns a declared schedule's
expression, zone, payload, queue and actor, the operator owns whether it is enabled. When and
how a schedule fires is the leader's and the backend's business (see ``ScheduleBackend``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, ScheduleRecord, ScheduleSpec, ScheduleSyncResult
from taskq_core.errors import ConfigError, PayloadValidationError
from taskq_core.names import check_name
from taskq_core.schedule import Schedule, check_timezone

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
