"""Cron schedules: their rows, the operator's and the code's writes, and the leader's fire.

A schedule fires its actor at the times its cron expression names in its timezone
(``taskq_core.cron_timing.Schedule``). ``next_fire_at`` is always computed from the backend's
clock (Postgres: the server's, read in the same transaction), never the caller's. Each fire
time makes exactly one job: the job's ``unique_key`` is ``schedule:NAME@FIRE_TIME`` (held
in every state), so a second insert for the same fire time is refused by the database even
when two leaders overlap. After downtime a schedule fires once, for its latest missed time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.values import UNSET
from taskq_core.cron_timing import Schedule
from taskq_core.ids import uuid7


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """One ``schedules`` row. ``queue`` None: the actor's stored queue at fire time.
    ``next_fire_at`` None only while disabled. ``last_job_id``: the job the last fire made
    (None when that fire time had its job already)."""

    id: UUID
    name: str
    actor: str
    queue: str | None
    cron: str
    timezone: str
    payload: dict[str, Any]
    enabled: bool
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    last_job_id: UUID | None
    declared_in_code: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule to create (client, CLI) or to upsert (``@cron`` at worker start).
    ``cron`` and ``timezone`` are checked by ``Schedule`` before a backend sees them."""

    name: str
    actor: str
    cron: str
    timezone: str = "UTC"
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduleUpdate:
    """A partial update; UNSET fields stay as they are. A new ``cron`` or ``timezone``, or
    ``enabled=True`` on a disabled schedule, recomputes ``next_fire_at`` from now (no
    catch-up for the time it was disabled); ``enabled=False`` stops it firing (the row stays,
    its ``next_fire_at`` becomes None). Bad values raise ValueError naming the field."""

    actor: Any = UNSET
    cron: Any = UNSET
    timezone: Any = UNSET
    payload: Any = UNSET
    queue: Any = UNSET
    enabled: Any = UNSET


@dataclass(frozen=True, slots=True)
class ScheduleSyncResult:
    """What a worker start's upsert of its ``@cron`` schedules did, by name. ``orphaned``:
    schedules declared in code earlier that this registry no longer declares (reported,
    never deleted: the operator deletes them)."""

    created: list[str]
    updated: list[str]
    unchanged: list[str]
    orphaned: list[str]


@dataclass(frozen=True, slots=True)
class FiredSchedule:
    """One schedule the leader fired. ``fire_at``: the fire time its job stands for (the
    latest due one); ``missed_since``: the first fire time that was due, when more than one
    was (the downtime a catch-up covers), else None. ``job_id`` None: that fire time had its
    job already (another leader fired it)."""

    name: str
    fire_at: datetime
    job_id: UUID | None
    next_fire_at: datetime
    missed_since: datetime | None = None


class ScheduleExistsError(ValueError):
    """A schedule of that name exists already."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a schedule named {name!r} already exists")
        self.name = name


def schedule_job_key(name: str, fire_at: datetime) -> str:
    """The ``unique_key`` of the job a schedule makes for one fire time."""
    return f"schedule:{name}@{fire_at.isoformat()}"


# --- the rules both backends apply (each backend only reads its clock and writes rows) ------
# The fields a schedule's owner writes (the operator's update, the code's upsert).
_WRITABLE = ("actor", "cron", "timezone", "payload", "queue", "enabled")
# The fields the code owns on a declared_in_code schedule (``enabled`` stays the operator's).
_CODE_OWNED = ("actor", "cron", "timezone", "payload", "queue")


def _checked(name: str, value: Any) -> Any:
    """``value`` for field ``name`` of a schedule, or ValueError naming the field."""
    if name in ("name", "actor") and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{name} must be a non-empty string")
    if name == "queue" and value is not None and (not isinstance(value, str) or not value):
        raise ValueError("queue must be a non-empty string or None")
    if name == "payload" and not isinstance(value, dict):
        raise ValueError("payload must be a JSON object")
    if name == "enabled" and not isinstance(value, bool):
        raise ValueError("enabled must be true or false")
    return value


def new_schedule(spec: ScheduleSpec, now: datetime, *, declared_in_code: bool) -> ScheduleRecord:
    """The row ``spec`` creates at ``now`` (the backend's clock): enabled, its first fire
    time strictly after now. ValueError names a bad field (cron and timezone included)."""
    for name in ("name", "actor", "payload", "queue"):
        _checked(name, getattr(spec, name))
    schedule = Schedule(spec.cron, spec.timezone)
    # Alike supervisor/schema.py's _resolve and worker/execute.py's job_context by shape only:
    # keyword fields, other data.
    return ScheduleRecord(
        id=uuid7(),
        name=spec.name,
        actor=spec.actor,
        queue=spec.queue,
        cron=schedule.expression,
        timezone=spec.timezone,
        payload=spec.payload,
        enabled=True,
        next_fire_at=schedule.next_fire(now),
        last_fired_at=None,
        last_job_id=None,
        declared_in_code=declared_in_code,
        created_at=now,
        updated_at=now,
    )


def _retimed(current: ScheduleRecord, changes: Mapping[str, Any], now: datetime) -> ScheduleRecord:
    """``current`` with ``changes`` applied at ``now``. A new expression or zone, or a
    disabled schedule enabled again, plans the next fire after now (no catch-up for the time
    before); a disabled schedule has no next fire."""
    row = replace(current, **changes, updated_at=now)
    schedule = Schedule(row.cron, row.timezone)  # ValueError for a bad expression or zone
    row = replace(row, cron=schedule.expression)
    if not row.enabled:
        return replace(row, next_fire_at=None)
    moved = (row.cron, row.timezone) != (current.cron, current.timezone)
    if moved or not current.enabled or row.next_fire_at is None:
        return replace(row, next_fire_at=schedule.next_fire(now))
    return row


def updated_schedule(
    current: ScheduleRecord, update: ScheduleUpdate, now: datetime
) -> ScheduleRecord:
    """The row after ``update`` at ``now`` (see ScheduleUpdate); ValueError names a bad field."""
    changes = {
        name: _checked(name, getattr(update, name))
        for name in _WRITABLE
        if getattr(update, name) is not UNSET
    }
    return _retimed(current, changes, now)


@dataclass(frozen=True, slots=True)
class CodeSchedulesPlan:
    """What a worker start's upsert writes: ``writes`` are whole rows (new ones with
    ``declared_in_code`` and fresh ids), ``result`` is what it reports."""

    writes: list[ScheduleRecord]
    result: ScheduleSyncResult


def plan_code_schedules(
    specs: Sequence[ScheduleSpec], stored: Iterable[ScheduleRecord], now: datetime
) -> CodeSchedulesPlan:
    """The upsert of the schedules a registry declares, given the stored rows of those names
    and every stored ``declared_in_code`` row (``stored``, read under lock). A schedule made
    by an operator under a declared name passes to the code."""
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        doubled = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"schedule names declared twice: {', '.join(doubled)}")
    by_name = {row.name: row for row in stored}
    writes: list[ScheduleRecord] = []
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    for spec in specs:
        fresh = new_schedule(spec, now, declared_in_code=True)
        current = by_name.get(spec.name)
        if current is None:
            writes.append(fresh)
            created.append(spec.name)
            continue
        code = {name: getattr(fresh, name) for name in _CODE_OWNED}
        if current.declared_in_code and all(getattr(current, k) == v for k, v in code.items()):
            unchanged.append(spec.name)
            continue
        writes.append(_retimed(current, {**code, "declared_in_code": True}, now))
        updated.append(spec.name)
    orphaned = sorted(
        row.name for row in by_name.values() if row.declared_in_code and row.name not in names
    )
    return CodeSchedulesPlan(writes, ScheduleSyncResult(created, updated, unchanged, orphaned))


@dataclass(frozen=True, slots=True)
class DueFire:
    """One due schedule's fire, planned at ``now``: see ``due_fire``."""

    fire_at: datetime
    missed_since: datetime | None
    next_fire_at: datetime


def due_fire(cron: str, timezone: str, next_fire_at: datetime, now: datetime) -> DueFire:
    """The fire of a schedule due at ``now`` (``next_fire_at <= now``): its job stands for
    the latest fire time at or before now (one catch-up job however many were missed, never
    earlier than the planned one), ``missed_since`` is the planned time when a later one
    fires, and the next fire time is the first after now."""
    schedule = Schedule(cron, timezone)
    fire_at = max(schedule.latest_fire(now), next_fire_at)
    missed_since = next_fire_at if fire_at > next_fire_at else None
    return DueFire(fire_at, missed_since, schedule.next_fire(now))


def schedule_job_metadata(name: str, fire_at: datetime) -> dict[str, Any]:
    """The ``metadata`` of the job a schedule makes for one fire time."""
    return {"schedule": name, "fire_time": fire_at.isoformat()}


def created_detail(row: ScheduleRecord) -> dict[str, Any]:
    """What the operator log records of a schedule created or deleted."""
    return {"actor": row.actor, "cron": row.cron, "timezone": row.timezone}


def schedule_changes(before: ScheduleRecord, after: ScheduleRecord) -> dict[str, Any]:
    """The operator-visible fields an update changed, as ``{field: [before, after]}`` (what
    the operator log records of a schedule update)."""
    fields = ("actor", "cron", "timezone", "payload", "queue", "enabled")
    return {
        name: [getattr(before, name), getattr(after, name)]
        for name in fields
        if getattr(before, name) != getattr(after, name)
    }


@runtime_checkable
class ScheduleBackend(Protocol):
    """Schedule rows, their writes, and the leader's fire of the due ones."""

    async def create_schedule(
        self, spec: ScheduleSpec, *, audit: Audit | None = None
    ) -> ScheduleRecord:
        """Insert an enabled schedule, its first ``next_fire_at`` on the backend's clock.
        Raises ScheduleExistsError when the name is taken. With ``audit``, an operator_log
        row (``schedule_create``) commits with it."""

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """One schedule by name, or None."""

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        """Schedules by name, optionally of one actor or one enabled state."""

    async def update_schedule(
        self, name: str, update: ScheduleUpdate, *, audit: Audit | None = None
    ) -> ScheduleRecord | None:
        """Apply ``update`` (see ScheduleUpdate); the row after, or None when no such name.
        With ``audit``, an operator_log row (``schedule_update``, the fields that changed)
        commits with it."""

    async def delete_schedule(self, name: str, *, audit: Audit | None = None) -> bool:
        """Delete the schedule (its jobs stay); False when there was none. With ``audit``,
        an operator_log row (``schedule_delete``) commits with it."""

    async def sync_code_schedules(self, specs: Sequence[ScheduleSpec]) -> ScheduleSyncResult:
        """Upsert the schedules a registry declares (``declared_in_code``): new ones are
        created enabled; existing ones take the code's actor, cron, timezone, payload and
        queue (a changed cron or timezone recomputes ``next_fire_at``) and keep the
        operator's ``enabled``. One transaction."""

    async def fire_due_schedules(self, limit: int) -> list[FiredSchedule]:
        """The leader's tick: for up to ``limit`` enabled schedules whose ``next_fire_at``
        has passed (on the backend's clock, read in the tick's transaction), insert one job
        for the latest due fire time (actor, payload; the schedule's queue or the actor's
        stored queue, retry policy and priority; metadata ``schedule`` and ``fire_time``;
        unique_key ``schedule_job_key``), set ``last_fired_at``, ``last_job_id`` and the next
        fire time after now, and NOTIFY the wake channel. All in one transaction; rows
        another tick holds are skipped."""
