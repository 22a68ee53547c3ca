"""``/schedules``: the cron schedules, whether each is enabled, its next fire times (as
``taskq schedules show`` computes them, in the schedule's zone and in UTC), when it last
fired and the job that made. ``/api/schedules`` is the JSON.

Enable, disable and run-now are POST actions, as ``taskq schedules enable|disable|run``:
enable acts in place; disable asks why on its own page (``/schedules/{name}/disable``), as
a queue's pause does; run-now asks for a confirmation, then fires one job at once (a plain
form lands on that job's page). Each is recorded with the web UI's operator (actions.py).
``POST /api/schedules/{name}/enable|disable|run`` (body ``{"reason": ...}``, optional) are
the actions for scripts. A schedule's name is one path segment, encoded (paths.py); an
unknown name is 404."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from litestar import Request, get, post
from litestar.exceptions import NotFoundException, PermissionDeniedException
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, URLEncodedBody
from litestar.response import Redirect, Template
from pydantic import BaseModel, Field

from taskq_cli.ui.actions import MAX_REASON, ReasonForm, check_reason
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.openapi import ErrorBody
from taskq_cli.ui.paths import path_segment, segment_value
from taskq_cli.ui.render import back_to, is_htmx, page
from taskq_core.backend.protocol import ScheduleRecord
from taskq_core.cron_schedules import upcoming_fires
from taskq_core.errors import ScheduleNotFoundError

# How many fire times a schedule lists (as ``taskq schedules show``).
SHOWN_FIRES = 5
READ_ONLY = "this admin UI is read-only (taskq ui serve --read-only)"
UNKNOWN_SCHEDULE = {404: ResponseSpec(ErrorBody, description="No schedule has that name.")}


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

    # Alike queues.QueueView.of and job_views.ProgressView.of by shape only: each copies its
    # own record's fields into its model.
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


# Mirrors job_detail.ActionRequest on purpose (see there).
class ScheduleActionRequest(BaseModel):
    """Why (recorded in the operator log, or the job's metadata for a run, with who)."""

    reason: str | None = Field(default=None, max_length=MAX_REASON)


class ScheduleRun(BaseModel):
    """The job a run-now made (metadata ``schedule``, ``manual``, ``by`` and ``why``)."""

    schedule: str
    job_id: UUID
    queue: str
    status: str


async def read_schedules(ui: Ui) -> SchedulesView:
    """The schedules as the page shows them."""
    records = await ui.list_schedules()
    return SchedulesView(
        now=datetime.now(UTC), schedules=[ScheduleView.of(record) for record in records]
    )


async def _known(ui: Ui, segment: str) -> ScheduleView:
    """The schedule whose name the path segment carries; 404 when none has it."""
    name = segment_value(segment)
    for record in await ui.list_schedules():
        if record.name == name:
            return ScheduleView.of(record)
    raise NotFoundException(f"no schedule named {name!r}")


async def _set_enabled(ui: Ui, segment: str, enabled: bool, reason: str | None) -> ScheduleView:
    """Enable or disable the schedule; the schedule after."""
    if ui.config.read_only:  # the security middleware refuses first; never act regardless
        raise PermissionDeniedException(READ_ONLY)
    name = segment_value(segment)
    try:
        return ScheduleView.of(await ui.actions.set_schedule_enabled(name, enabled, reason))
    except ScheduleNotFoundError as exc:
        raise NotFoundException(str(exc)) from None


async def _run(ui: Ui, segment: str, reason: str | None) -> ScheduleRun:
    """Fire the schedule once now; the job it made."""
    if ui.config.read_only:
        raise PermissionDeniedException(READ_ONLY)
    name = segment_value(segment)
    try:
        job = await ui.actions.run_schedule(name, reason)
    except ScheduleNotFoundError as exc:
        raise NotFoundException(str(exc)) from None
    return ScheduleRun(schedule=name, job_id=job.id, queue=job.queue, status=job.status.value)


async def _answer(
    ui: Ui, request: Request[Any, Any, Any], outcome: str, job_id: UUID | None = None
) -> Template | Redirect:
    """What a browser sees after an action: the refreshed table with the outcome (htmx) or
    the page."""
    if is_htmx(request):
        view = await read_schedules(ui)
        return page("schedules_action", None, view=view, outcome=outcome, job_id=job_id)
    return back_to("/schedules")


@get("/schedules", include_in_schema=False)
async def schedules_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The schedules page, or only its live part (``?part=live``)."""
    return page("schedules", part, view=await read_schedules(ui))


@post("/schedules/{name:str}/enable", include_in_schema=False, status_code=200)
async def enable_action(
    ui: UiDependency, request: Request[Any, Any, Any], name: FromPath[str]
) -> Template | Redirect:
    """Let the schedule fire again, from its next fire time after now (no catch-up)."""
    after = await _set_enabled(ui, name, True, None)
    return await _answer(ui, request, f"{after.name} enabled")


@get("/schedules/{name:str}/disable", include_in_schema=False)
async def disable_form(ui: UiDependency, name: FromPath[str]) -> Template:
    """The form that asks why before disabling."""
    if ui.config.read_only:
        raise PermissionDeniedException(READ_ONLY)
    return Template(
        template_name="schedule_disable.html",
        context={"page": "schedules", "schedule": await _known(ui, name)},
    )


# Mirrors the job page's form posts on purpose (see job_detail.retry_action).
@post("/schedules/{name:str}/disable", include_in_schema=False, status_code=200)
async def disable_action(
    ui: UiDependency,
    request: Request[Any, Any, Any],
    name: FromPath[str],
    data: URLEncodedBody[ReasonForm | None] = None,
) -> Template | Redirect:
    """Stop the schedule firing until it is enabled again."""
    reason = check_reason(None if data is None else data.reason)
    after = await _set_enabled(ui, name, False, reason)
    return await _answer(ui, request, f"{after.name} disabled")


@post("/schedules/{name:str}/run", include_in_schema=False, status_code=200)
async def run_action(
    ui: UiDependency, request: Request[Any, Any, Any], name: FromPath[str]
) -> Template | Redirect:
    """Fire the schedule once now: htmx gets the table and a link to the job, a plain form
    the job's page."""
    run = await _run(ui, name, None)
    if not is_htmx(request):
        return back_to(f"/jobs/{path_segment(run.job_id)}")
    return await _answer(ui, request, f"{run.schedule} ran now: job", run.job_id)


@get("/api/schedules")
async def schedules_api(ui: UiDependency) -> SchedulesView:
    """Every cron schedule with its next fire times and its last fire."""
    return await read_schedules(ui)


def _api_reason(data: ScheduleActionRequest | None) -> str | None:
    return check_reason(None if data is None else data.reason)


@post("/api/schedules/{name:str}/enable", status_code=200, responses=UNKNOWN_SCHEDULE)
async def enable_api(
    ui: UiDependency, name: FromPath[str], data: JSONBody[ScheduleActionRequest | None] = None
) -> ScheduleView:
    """Enable a schedule (with a reason, for the operator log); the schedule after."""
    return await _set_enabled(ui, name, True, _api_reason(data))


@post("/api/schedules/{name:str}/disable", status_code=200, responses=UNKNOWN_SCHEDULE)
async def disable_api(
    ui: UiDependency, name: FromPath[str], data: JSONBody[ScheduleActionRequest | None] = None
) -> ScheduleView:
    """Disable a schedule (with a reason, for the operator log); the schedule after."""
    return await _set_enabled(ui, name, False, _api_reason(data))


@post("/api/schedules/{name:str}/run", status_code=200, responses=UNKNOWN_SCHEDULE)
async def run_api(
    ui: UiDependency, name: FromPath[str], data: JSONBody[ScheduleActionRequest | None] = None
) -> ScheduleRun:
    """Fire a schedule once now, whatever its times and whether it is enabled; the job."""
    return await _run(ui, name, _api_reason(data))


HANDLERS = [
    schedules_page,
    enable_action,
    disable_form,
    disable_action,
    run_action,
    schedules_api,
    enable_api,
    disable_api,
    run_api,
]
