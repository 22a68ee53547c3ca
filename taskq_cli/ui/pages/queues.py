"""``/queues``: per queue what waits, what runs, what failed lately, how old the oldest
pending job is, its mode and cap, whether it is paused (who, when, why) and, for a backlog,
what holds it (taskq top's "why"). Pause and resume are POST actions; pausing asks for a
reason on its own page (``/queues/{name}/pause``), out of the live region that would wipe
what is being typed. ``/api/queues`` is the JSON, ``POST /api/queues/{name}/pause|resume``
the actions for scripts.

A queue's name is one path segment, encoded (paths.py) and decoded here, so any stored name
reaches its own queue. The UI never makes a queue: an unknown name is 404, and one that no
queue could be made with now (taskq_core/names.py) is 400.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Request, get, post
from litestar.exceptions import (
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, URLEncodedBody
from litestar.response import Redirect, Template
from pydantic import BaseModel, Field

from taskq_cli.dashboard.queue_blockers import PER_JOB, queue_blocker
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.ui.actions import MAX_REASON, ReasonForm, check_reason
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.openapi import ErrorBody
from taskq_cli.ui.paths import segment_value
from taskq_cli.ui.render import back_to, is_htmx, page
from taskq_core.backend.protocol import QueueActivity
from taskq_core.names import NAME_RULE, is_valid_name
from taskq_core.statemachine import JobStatus

UNKNOWN_QUEUE = {
    400: ResponseSpec(ErrorBody, description="No queue can have that name."),
    404: ResponseSpec(ErrorBody, description="No queue has that name."),
}
# taskq top names the key that explains a job; the web page names the page.
_PER_JOB = "per job: see a job's explain"


class PauseNote(BaseModel):
    """Who paused a queue (``user@host``; the web UI adds ``(web UI)``), when, and why."""

    paused_at: datetime
    paused_by: str | None
    reason: str | None


class QueueView(BaseModel):
    """One queue. ``pending``, ``scheduled``, ``running`` (bodies running) and ``claimed``
    (claimed ahead of a free consumer) are exact; ``failed`` and ``finished`` count the
    window; ``why``: what holds back a backlog, empty when nothing waits long."""

    name: str
    pending: int
    scheduled: int
    running: int
    claimed: int
    failed: int
    finished: dict[str, int]
    finished_per_minute: list[int]
    oldest_pending_at: datetime | None
    mode: str
    max_concurrent: int | None
    paused: bool
    pause: PauseNote | None
    why: str

    # Alike schedules.ScheduleView.of and job_views.ProgressView.of by shape only: each
    # copies its own record's fields into its model.
    @classmethod
    def of(cls, queue: QueueActivity, snapshot: Snapshot) -> QueueView:
        note = snapshot.pauses.get(queue.name) if queue.paused else None
        why = queue_blocker(queue, snapshot)
        return cls(
            name=queue.name,
            pending=queue.pending,
            scheduled=queue.scheduled,
            running=queue.running,
            claimed=queue.claimed,
            failed=queue.finished.get(JobStatus.FAILED, 0),
            finished={status.value: n for status, n in queue.finished.items()},
            finished_per_minute=queue.finished_per_minute,
            oldest_pending_at=queue.oldest_pending_at,
            mode=queue.mode,
            max_concurrent=queue.max_concurrent,
            paused=queue.paused,
            pause=None
            if note is None
            else PauseNote(paused_at=note.paused_at, paused_by=note.paused_by, reason=note.reason),
            why=_PER_JOB if why == PER_JOB else why,
        )


class QueuesView(BaseModel):
    """Every queue that has jobs or settings, read at ``now`` on the database clock."""

    now: datetime
    window_seconds: float
    queues: list[QueueView]


# Mirrors job_detail.ActionRequest on purpose (see there).
class PauseRequest(BaseModel):
    """Why the queue is paused (shown with who and when)."""

    reason: str | None = Field(default=None, max_length=MAX_REASON)


def _view(snapshot: Snapshot) -> QueuesView:
    return QueuesView(
        now=snapshot.now,
        window_seconds=snapshot.window.total_seconds(),
        queues=[QueueView.of(queue, snapshot) for queue in snapshot.queues],
    )


async def read_queues(ui: Ui) -> QueuesView:
    """One snapshot, as the queues page shows it."""
    return _view(await ui.snapshot())


async def _known(ui: Ui, segment: str) -> QueueView:
    """The queue whose name the path segment carries, as the page shows it; 404 for a
    queue with neither jobs nor settings (a typo would otherwise create it), 400 when no
    queue could be made with that name."""
    name = segment_value(segment)
    view = await read_queues(ui)
    for queue in view.queues:
        if queue.name == name:
            return queue
    if not is_valid_name(name):
        raise _bad_request(f"{name!r} is not a queue name: a queue name is {NAME_RULE}")
    raise NotFoundException(f"unknown queue {name!r}")


def _bad_request(message: str) -> Exception:
    return ValidationException(message)


async def _set_paused(ui: Ui, segment: str, paused: bool, reason: str | None) -> None:
    """Pause or resume the queue. A queue already paused keeps its first pause and note (who
    paused it and why), as ``taskq queues pause`` does without ``--force``."""
    queue = await _known(ui, segment)
    if paused and queue.paused:
        return
    await ui.source.set_queue_paused(queue.name, paused, reason)


async def _answer(ui: Ui, request: Request[Any, Any, Any]) -> Template | Redirect:
    """What a browser sees after an action: the refreshed table (htmx) or the page."""
    if is_htmx(request):
        return page("queues", "live", view=await read_queues(ui))
    return back_to("/queues")


@get("/queues", include_in_schema=False)
async def queues_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The queues page, or only its live part (``?part=live``)."""
    return page("queues", part, view=await read_queues(ui))


@get("/queues/{name:str}/pause", include_in_schema=False)
async def pause_form(ui: UiDependency, name: FromPath[str]) -> Template:
    """The form that asks why before pausing."""
    if ui.config.read_only:
        raise PermissionDeniedException("this admin UI is read-only (taskq ui serve --read-only)")
    return Template(
        template_name="queue_pause.html",
        context={"page": "queues", "queue": await _known(ui, name)},
    )


@post("/queues/{name:str}/pause", include_in_schema=False)
async def pause_action(
    ui: UiDependency,
    request: Request[Any, Any, Any],
    name: FromPath[str],
    data: URLEncodedBody[ReasonForm],
) -> Template | Redirect:
    """Pause the queue: workers stop claiming its jobs (running ones finish)."""
    await _set_paused(ui, name, True, check_reason(data.reason))
    return await _answer(ui, request)


@post("/queues/{name:str}/resume", include_in_schema=False)
async def resume_action(
    ui: UiDependency, request: Request[Any, Any, Any], name: FromPath[str]
) -> Template | Redirect:
    """Resume the queue: workers claim its jobs again."""
    await _set_paused(ui, name, False, None)
    return await _answer(ui, request)


@get("/api/queues")
async def queues_api(ui: UiDependency) -> QueuesView:
    """Every queue: counts, oldest pending job, mode, cap, pause note, what holds it."""
    return await read_queues(ui)


@post("/api/queues/{name:str}/pause", status_code=200, responses=UNKNOWN_QUEUE)
async def pause_api(
    ui: UiDependency, name: FromPath[str], data: JSONBody[PauseRequest | None] = None
) -> QueueView:
    """Pause a queue (with a reason); the queue after."""
    reason = check_reason(None if data is None else data.reason)
    await _set_paused(ui, name, True, reason)
    return await _known(ui, name)


@post("/api/queues/{name:str}/resume", status_code=200, responses=UNKNOWN_QUEUE)
async def resume_api(ui: UiDependency, name: FromPath[str]) -> QueueView:
    """Resume a paused queue; the queue after."""
    await _set_paused(ui, name, False, None)
    return await _known(ui, name)


HANDLERS = [
    queues_page,
    pause_form,
    pause_action,
    resume_action,
    queues_api,
    pause_api,
    resume_api,
]
