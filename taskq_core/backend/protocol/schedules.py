"""Cron schedules: their rows, the operator's and the code's writes, and the leader's fire.

A schedule fires its actor at the times its cron expression names in its timezone
(``taskq_core.schedule.Schedule``). ``next_fire_at`` is always computed from the backend's
clock (Postgres: the server's, read in the same transaction), never the caller's. Each fire
time makes exactly one job: the job's ``unique_key`` is ``schedule:NAME@FIRE_TIME`` (held
in every state), so a second insert for the same fire time is refused by the database even
when two leaders overlap. After downtime a schedule fires once, for its latest missed time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from taskq_core.backend.protocol.values import UNSET


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
    catch-up for the time it was disabled); ``enabled=False`` stops it firing."""

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


@runtime_checkable
class ScheduleBackend(Protocol):
    """Schedule rows, their writes, and the leader's fire of the due ones."""

    async def create_schedule(self, spec: ScheduleSpec) -> ScheduleRecord:
        """Insert an enabled schedule, its first ``next_fire_at`` on the backend's clock.
        Raises ScheduleExistsError when the name is taken."""

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """One schedule by name, or None."""

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        """Schedules by name, optionally of one actor or one enabled state."""

    async def update_schedule(self, name: str, update: ScheduleUpdate) -> ScheduleRecord | None:
        """Apply ``update`` (see ScheduleUpdate); the row after, or None when no such name."""

    async def delete_schedule(self, name: str) -> bool:
        """Delete the schedule (its jobs stay); False when there was none."""

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
