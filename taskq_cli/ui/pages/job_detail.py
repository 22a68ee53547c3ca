"""``/jobs/{id}``: one job: its fields, payload, result or error with its traceback,
progress, batch, workflow (a waiting step: what it waits for), the ``jobs explain`` answer,
attempts and events; an archived job with a banner (the prune moved it: its events are gone
by design). Retry and cancel ask why on their own page (``GET /jobs/{id}/retry|cancel``),
out of the live region that would wipe what is being typed, and ``POST
/jobs/{id}/retry|cancel`` act, recording the reason and the web UI's operator in the job's
event (actions.py); ``/api/jobs/{id}`` and
``POST /api/jobs/{id}/retry|cancel`` (body ``{"reason": ...}``, optional) are the JSON
twins. A long payload or result shows its first characters; ``/jobs/{id}/payload`` and
``/jobs/{id}/result`` download the whole value.

A job is named as the CLI names it: its whole id or a unique prefix or suffix (a piece
redirects to the whole id's page, the stable URL). Text that cannot be part of an id
answers 400, an id no job has 404, an ambiguous piece 400 naming how many match. A whole id
that is no job's but another object's (a batch's, a workflow's) redirects to that object's
page.

An action answers a plain form with a redirect back to the page (which says the outcome);
htmx gets the refreshed live part with the outcome beside it, or, when the action was
refused (the job moved on), the reason with 409.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.exceptions import (
    ClientException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.params import FromPath, FromQuery, JSONBody, PathParameter, URLEncodedBody
from litestar.response import Redirect, Template
from pydantic import BaseModel, Field

from taskq_cli.job_ids import full_job_id
from taskq_cli.json_preview import preview_json
from taskq_cli.ui.actions import MAX_REASON, ReasonForm, check_reason
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.pages.job_views import JobDetailView
from taskq_cli.ui.pages.workflows import workflow_path
from taskq_cli.ui.paths import path_segment
from taskq_cli.ui.render import LIVE, is_htmx, missing, page
from taskq_core.backend.protocol.admin import JobIdSearchTooSlowError, normalize_id_fragment
from taskq_core.errors import ConfigError, JobNotFoundError
from taskq_core.explain import Explanation

READ_ONLY = "this admin UI is read-only (taskq ui serve --read-only)"

Action = Literal["retry", "cancel"]
# The values a job's page links to in whole (``/jobs/{id}/payload``, ``/jobs/{id}/result``).
Part = Literal["payload", "result"]
# Each outcome an action can have: whether it did what was asked, and what to say.
OUTCOMES: dict[str, tuple[bool, str]] = {
    "retried": (True, "retried: back to pending with a fresh attempt budget"),
    "not_retried": (False, "not retried: only a failed, crashed or cancelled job is retried"),
    "cancelled": (True, "cancelled"),
    "requested": (True, "cancel requested: its worker stops it at its next check"),
    "already_requested": (False, "not cancelled again: a cancel was already requested"),
    "terminal": (False, "not cancelled: it has already finished"),
    "not_found": (False, "no such job any more"),
    "archived": (False, "nothing done: the job is archived (the prune moved it)"),
}


# A job named in an API path: its id, or a unique prefix or suffix of its hex digits.
JobRef = Annotated[
    str,
    PathParameter(
        pattern=r"^[0-9A-Fa-f-]{1,36}$",
        description="The job's id, or a unique prefix or suffix of it.",
    ),
]


class ActionOutcome(BaseModel):
    """What an action did: ``done`` False when the job was not in a state it applies to
    (``outcome`` says which), and the job's status after."""

    job_id: UUID
    action: Action
    outcome: str
    done: bool
    message: str
    status: str | None


# ActionRequest, PauseRequest (queues) and ScheduleActionRequest (schedules) mirror each
# other on purpose: each is its own API's body, and its docstring says there what it records.
class ActionRequest(BaseModel):
    """Why (recorded in the job's event with who: the web UI's operator)."""

    reason: str | None = Field(default=None, max_length=MAX_REASON)


# What the action pages say: the heading's verb, what the action does, its button.
ACTION_PAGES: dict[Action, tuple[str, str, str]] = {
    "retry": (
        "Retry",
        "It goes back to pending with a fresh attempt budget.",
        "Retry job",
    ),
    "cancel": (
        "Cancel",
        "A waiting job is cancelled at once; a running one is asked to stop (its worker "
        "stops it at its next check).",
        "Cancel job",
    ),
}


class BadJobRef(Exception):
    """A job reference that names no job: ``status`` 400 (not an id, ambiguous) or 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def find_job(ui: Ui, ref: str) -> UUID:
    """The job ``ref`` names (a whole id, or a unique piece); BadJobRef otherwise."""
    whole = full_job_id(ref)
    if whole is not None:
        return whole
    try:
        normalize_id_fragment(ref)
    except ValueError:
        raise BadJobRef(400, f"{ref!r} is not a job id (a UUID, or a piece of one)") from None
    try:
        return await ui.source.resolve_job_id(ref)
    except JobNotFoundError as exc:
        raise BadJobRef(404, str(exc)) from None
    except (ConfigError, JobIdSearchTooSlowError) as exc:  # ambiguous, or too slow a scan
        raise BadJobRef(400, str(exc)) from None


async def _explain(ui: Ui, job_id: UUID) -> Explanation | None:
    try:
        return await ui.source.explain(job_id)
    except JobNotFoundError:  # gone between the two reads
        return None


async def read_job(ui: Ui, job_id: UUID) -> JobDetailView | None:
    """Everything the page shows of the job (None: neither live nor archived), its
    workflow's among it, read within the read timeout."""
    detail, explanation = await ui.read(
        asyncio.gather(ui.source.job_detail(job_id), _explain(ui, job_id))
    )
    if detail is None:
        return None
    return JobDetailView.of(detail, explanation)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _preview(value: Any, job_id: UUID, which: Part) -> dict[str, Any]:
    """What the page shows of a payload or result: its first characters (``json_preview``),
    its size, and the note and link to the whole of it when it is cut."""
    shown = preview_json(value, indent=2)
    cut = f"Showing the first {len(shown.text):,} characters. " if shown.truncated else ""
    return {
        "text": shown.text,
        "truncated": shown.truncated,
        "note": cut,
        "link": f"Download the whole {which} (JSON, {shown.size:,} bytes)",
        "href": f"/jobs/{path_segment(job_id)}/{which}",
    }


def shown_json(view: JobDetailView) -> dict[str, Any]:
    """The payload, result, metadata and each event's detail as the page prints them
    (JSON text, escaped by the template like any other value); a long payload or result as
    its preview, with the link to the whole value."""
    job = view.job
    return {
        "payload": _preview(job.payload, job.id, "payload"),
        "result": _preview(job.result, job.id, "result"),
        "metadata": _pretty(job.metadata),
        "events": {
            event.id: json.dumps(event.detail, sort_keys=True, ensure_ascii=False, default=str)
            for event in view.events
        },
    }


def _detail_page(
    view: JobDetailView, part: str | None, outcome: str | None, *, name: str = "job_detail"
) -> Template:
    done, said = OUTCOMES.get(outcome or "", (True, ""))
    return page(
        name,
        part,
        page="jobs",
        view=view,
        shown=shown_json(view),
        outcome=said or None,
        refused=not done,
    )


async def _batch_page(ui: Ui, ident: UUID) -> str | None:
    """The batch page of ``ident``, when a batch has that id (a row or children)."""
    found = await ui.source.batch_detail(ident, failures=0)
    return None if found is None else f"/batches/{path_segment(ident)}"


# What else a whole id pasted into /jobs/{id} may name, tried in order when no job has it:
# each answers the page to redirect to, or None.
OTHER_PAGES: tuple[Callable[[Ui, UUID], Awaitable[str | None]], ...] = (
    _batch_page,
    workflow_path,
)


async def _elsewhere(ui: Ui, ref: str) -> Redirect | None:
    """A redirect to the page of the object other than a job that ``ref`` (a whole id)
    names; None when it is no whole id, or names nothing else either."""
    ident = full_job_id(ref)
    if ident is None:
        return None
    for other_page in OTHER_PAGES:
        path = await other_page(ui, ident)
        if path is not None:
            return Redirect(path=path, status_code=302)
    return None


@get("/jobs/{ref:str}", include_in_schema=False)
async def job_page(
    ui: UiDependency,
    ref: FromPath[str],
    part: FromQuery[str | None] = None,
    outcome: FromQuery[str | None] = None,
) -> Template | Redirect | Response[str]:
    """A job's page (``?part=live``: the part htmx polls; ``?outcome=``: what the last
    action did, after a plain form's redirect)."""
    try:
        job_id = await find_job(ui, ref)
    except BadJobRef as exc:
        return missing("jobs", "job", exc.status, str(exc), part)
    if str(job_id) != ref:
        query = f"?part={LIVE}" if part == LIVE else ""
        return Redirect(path=f"/jobs/{path_segment(job_id)}{query}", status_code=302)
    view = await read_job(ui, job_id)
    if view is None:
        other = None if part == LIVE else await _elsewhere(ui, ref)
        return other or missing("jobs", "job", 404, f"no job with id {job_id}", part)
    return _detail_page(view, part, outcome)


async def _action_page(ui: Ui, ref: str, action: Action) -> Template | Redirect | Response[str]:
    """The page that asks why before a retry or cancel (what it does, the job, the form);
    when the action no longer applies, it says so instead of offering it."""
    if ui.config.read_only:
        raise PermissionDeniedException(READ_ONLY)
    try:
        job_id = await find_job(ui, ref)
    except BadJobRef as exc:
        return missing("jobs", "job", exc.status, str(exc), None)
    if str(job_id) != ref:
        return Redirect(path=f"/jobs/{path_segment(job_id)}/{action}", status_code=302)
    view = await read_job(ui, job_id)
    if view is None:
        return missing("jobs", "job", 404, f"no job with id {job_id}", None)
    verb, does, button = ACTION_PAGES[action]
    applies = view.can_retry if action == "retry" else view.can_cancel
    return Template(
        template_name="job_action.html",
        context={
            "page": "jobs",
            "view": view,
            "action": action,
            "verb": verb,
            "does": does,
            "button": button,
            "applies": applies,
        },
    )


@get("/jobs/{ref:str}/retry", include_in_schema=False)
async def retry_form(ui: UiDependency, ref: FromPath[str]) -> Template | Redirect | Response[str]:
    """The form that asks why before a retry."""
    return await _action_page(ui, ref, "retry")


@get("/jobs/{ref:str}/cancel", include_in_schema=False)
async def cancel_form(ui: UiDependency, ref: FromPath[str]) -> Template | Redirect | Response[str]:
    """The form that asks why before a cancel."""
    return await _action_page(ui, ref, "cancel")


async def act(ui: Ui, job_id: UUID, action: Action, reason: str | None = None) -> str:
    """Retry or cancel the job, recording ``reason`` and the web UI's operator; the
    outcome's code (a key of OUTCOMES). BadJobRef (404) when neither the jobs table nor the
    archive holds it."""
    if ui.config.read_only:  # the security middleware refuses first; never act regardless
        raise PermissionDeniedException(READ_ONLY)
    detail = await ui.source.job_detail(job_id)
    if detail is None:
        raise BadJobRef(404, f"no job with id {job_id}")
    if detail.archived is not None:
        return "archived"
    if action == "retry":
        return "retried" if await ui.actions.retry_job(job_id, reason) else "not_retried"
    return await ui.actions.cancel_job(job_id, reason)


async def _page_action(
    ui: Ui, request: Request[Any, Any, Any], ref: str, action: Action, form: ReasonForm | None
) -> Template | Redirect | Response[str]:
    reason = check_reason(None if form is None else form.reason)
    try:
        job_id = await find_job(ui, ref)
        outcome = await act(ui, job_id, action, reason)
    except BadJobRef as exc:
        return missing("jobs", "job", exc.status, str(exc), LIVE if is_htmx(request) else None)
    done, said = OUTCOMES[outcome]
    if not is_htmx(request):
        return Redirect(path=f"/jobs/{path_segment(job_id)}?outcome={outcome}", status_code=303)
    view = await read_job(ui, job_id)
    if not done or view is None:
        return Response(f"job {job_id}: {said}", status_code=409, media_type="text/plain")
    return _detail_page(view, None, outcome, name="job_detail_action")


# The form posts (these two, and the schedules page's) mirror each other on purpose:
# litestar needs one handler per route; the work is in one helper behind each.
@post("/jobs/{ref:str}/retry", include_in_schema=False, status_code=200)
async def retry_action(
    ui: UiDependency,
    request: Request[Any, Any, Any],
    ref: FromPath[str],
    data: URLEncodedBody[ReasonForm | None] = None,
) -> Template | Redirect | Response[str]:
    """Retry a failed, crashed or cancelled job: back to pending, a fresh attempt budget."""
    return await _page_action(ui, request, ref, "retry", data)


@post("/jobs/{ref:str}/cancel", include_in_schema=False, status_code=200)
async def cancel_action(
    ui: UiDependency,
    request: Request[Any, Any, Any],
    ref: FromPath[str],
    data: URLEncodedBody[ReasonForm | None] = None,
) -> Template | Redirect | Response[str]:
    """Cancel a waiting job at once, or ask the worker running it to stop."""
    return await _page_action(ui, request, ref, "cancel", data)


def _api_error(exc: BadJobRef) -> ClientException:
    if exc.status == 404:
        return NotFoundException(str(exc))
    return ValidationException(str(exc))


@get("/api/jobs/{ref:str}", raises=[ValidationException, NotFoundException])
async def job_api(ui: UiDependency, ref: JobRef) -> JobDetailView:
    """One job (its whole id, or a unique prefix or suffix): fields, payload, result or
    error, progress, batch, attempts, events, the explain answer, archived or not."""
    try:
        job_id = await find_job(ui, ref)
    except BadJobRef as exc:
        raise _api_error(exc) from None
    view = await read_job(ui, job_id)
    if view is None:
        raise NotFoundException(f"no job with id {job_id}")
    return view


async def _api_action(
    ui: Ui, ref: str, action: Action, body: ActionRequest | None
) -> ActionOutcome:
    reason = check_reason(None if body is None else body.reason)
    try:
        job_id = await find_job(ui, ref)
        outcome = await act(ui, job_id, action, reason)
    except BadJobRef as exc:
        raise _api_error(exc) from None
    done, said = OUTCOMES[outcome]
    after = await ui.source.job_detail(job_id)
    return ActionOutcome(
        job_id=job_id,
        action=action,
        outcome=outcome,
        done=done,
        message=said,
        status=None if after is None else after.job.status.value,
    )


@post(
    "/api/jobs/{ref:str}/retry",
    status_code=200,
    raises=[ValidationException, NotFoundException, PermissionDeniedException],
)
async def retry_api(
    ui: UiDependency, ref: JobRef, data: JSONBody[ActionRequest | None] = None
) -> ActionOutcome:
    """Retry a failed, crashed or cancelled job (``done`` False for any other); the
    reason, when given, is recorded with who in the job's event."""
    return await _api_action(ui, ref, "retry", data)


@post(
    "/api/jobs/{ref:str}/cancel",
    status_code=200,
    raises=[ValidationException, NotFoundException, PermissionDeniedException],
)
async def cancel_api(
    ui: UiDependency, ref: JobRef, data: JSONBody[ActionRequest | None] = None
) -> ActionOutcome:
    """Cancel a waiting job, or ask its worker to stop a running one (``done`` False for a
    finished job); the reason, when given, is the job's cancel reason and is recorded with
    who in its event."""
    return await _api_action(ui, ref, "cancel", data)


async def _whole_value(ui: Ui, ref: str, which: Part) -> Response[bytes]:
    """One job's payload or result, all of it, as a JSON download (404: no such job, or no
    result)."""
    try:
        job_id = await find_job(ui, ref)
    except BadJobRef as exc:
        raise _api_error(exc) from None
    detail = await ui.source.job_detail(job_id)
    if detail is None:
        raise NotFoundException(f"no job with id {job_id}")
    value = detail.job.payload if which == "payload" else detail.job.result
    if value is None:
        raise NotFoundException(f"job {job_id} has no {which}")
    body = json.dumps(value, ensure_ascii=False).encode()
    return Response(
        body,
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="job-{job_id}-{which}.json"'},
    )


@get("/jobs/{ref:str}/payload", include_in_schema=False)
async def payload_download(ui: UiDependency, ref: JobRef) -> Response[bytes]:
    """A job's whole payload as JSON (the job page shows its first characters)."""
    return await _whole_value(ui, ref, "payload")


@get("/jobs/{ref:str}/result", include_in_schema=False)
async def result_download(ui: UiDependency, ref: JobRef) -> Response[bytes]:
    """A job's whole result as JSON (the job page shows its first characters)."""
    return await _whole_value(ui, ref, "result")


HANDLERS = [
    job_page,
    retry_form,
    cancel_form,
    retry_action,
    cancel_action,
    job_api,
    retry_api,
    cancel_api,
    payload_download,
    result_download,
]
