"""``/schedules``: the cron schedules, whether each is enabled, its next fire times (as
``taskq schedules show`` computes them, in the schedule's zone and in UTC), when it last
fired and the job that made. ``/api/schedules`` is the JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from litestar import get
from litestar.params import FromQuery
from litestar.response import Template
from pydantic import BaseModel

from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.render import page
from taskq_core.backend.protocol import ScheduleRecord
from taskq_core.cron_schedules import upcoming_fires

# How many fire times a schedule lists (as ``taskq schedules show``).
SHOWN_FIRES = 5


class ScheduleView(BaseModel):
    """One schedule. ``queue`` None: the actor's queue at fire time. ``source``: ``code``
    (``@cron``, rewritten by every worker start) or ``database``. ``next_fires``: the next
    fire times in the schedule's zone (none while disabled); the first may lie in the past
    while no leader fires it."""

    name: str
    actor: str
    queue: str | None
    cron: str
    timezone: str
    payload: dict[str, object]
    enabled: bool
    source: Literal["code", "database"]
    next_fires: list[datetime]
    last_fired_at: datetime | None
    last_job_id: UUID | None

    @classmethod
    def of(cls, record: ScheduleRecord) -> ScheduleView:
        zone = ZoneInfo(record.timezone)
        return cls(
            name=record.name,
            actor=record.actor,
            queue=record.queue,
            cron=record.cron,
            timezone=record.timezone,
            payload=record.payload,
            enabled=record.enabled,
            source="code" if record.declared_in_code else "database",
            next_fires=[fire.astimezone(zone) for fire in upcoming_fires(record, SHOWN_FIRES)],
            last_fired_at=record.last_fired_at,
            last_job_id=record.last_job_id,
        )


class SchedulesView(BaseModel):
    """Every schedule by name; ``now`` is this server's clock (the ages shown)."""

    now: datetime
    schedules: list[ScheduleView]


async def read_schedules(ui: Ui) -> SchedulesView:
    """The schedules as the page shows them."""
    records = await ui.list_schedules()
    return SchedulesView(
        now=datetime.now(UTC), schedules=[ScheduleView.of(record) for record in records]
    )


@get("/schedules", include_in_schema=False)
async def schedules_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The schedules page, or only its live part (``?part=live``)."""
    return page("schedules", part, view=await read_schedules(ui))


@get("/api/schedules")
async def schedules_api(ui: UiDependency) -> SchedulesView:
    """Every cron schedule with its next fire times and its last fire."""
    return await read_schedules(ui)


HANDLERS = [schedules_page, schedules_api]
