"""``/jobs``: jobs newest first, filtered by status, queue, actor, creation and finish time
and batch (``job_filter``), a keyset page at a time (the next page's link carries the
cursor of ``taskq jobs list``, never an offset). ``/api/jobs`` is the same read as JSON.

A filter the page cannot read answers 400 with the form and the reason; a form's empty
fields are dropped by a redirect to the filter's own URL, so the address bar always holds
the stable URL of what is shown.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Request, get
from litestar.exceptions import ValidationException
from litestar.params import QueryParameter
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.pages.job_filter import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    PARAMS,
    TIME_PARAMS,
    FilterError,
    JobsView,
    Params,
    has_empty_values,
    parse,
)
from taskq_cli.ui.pages.job_views import JobLine
from taskq_cli.ui.render import LIVE, page
from taskq_core.statemachine import JobStatus

_TIME_HELP = "how long ago (30m, 2h, 7d) or an ISO-8601 time (UTC when it names no offset)"


class JobsPage(BaseModel):
    """One page of jobs, newest first: ``total`` matches in all (counted up to 1,000;
    ``total_exact`` is False past that), and the cursor of the next page (None: the last)."""

    jobs: list[JobLine]
    count: int
    total: int
    total_exact: bool
    next_cursor: str | None


async def read_jobs(ui: Ui, view: JobsView) -> tuple[JobsPage, JobsView | None]:
    """The page of jobs ``view`` selects, and the filter of the next page (None: none)."""
    found = await ui.source.search_jobs(view.job_query())
    following = view.next_page(found.next_after)
    return (
        JobsPage(
            jobs=[JobLine.of(job) for job in found.jobs],
            count=len(found.jobs),
            total=found.total,
            total_exact=found.total_exact,
            next_cursor=None if following is None else following.cursor,
        ),
        following,
    )


def _form(params: Params) -> dict[str, list[str]]:
    """The form's fields as given (to show them again next to what was wrong)."""
    return {name: [v for v in params.get(name, ()) if v.strip()] for name in PARAMS}


def _view_form(view: JobsView) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {name: [] for name in PARAMS}
    for name, value in view.pairs(cursor=False):
        form[name].append(value)
    return form


def _page(
    part: str | None,
    *,
    form: dict[str, list[str]],
    view: JobsView | None = None,
    result: JobsPage | None = None,
    following: JobsView | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Template:
    template = page(
        "jobs",
        part,
        view=view,
        result=result,
        next_url=None if following is None else following.url(),
        live_url=None if view is None else view.url(part=LIVE),
        first_url=None if view is None or view.cursor is None else view.first_page_url(),
        form=form,
        error=error,
        statuses=[status.value for status in JobStatus],
        time_params=TIME_PARAMS,
        default_limit=DEFAULT_LIMIT,
    )
    template.status_code = status_code
    return template


@get("/jobs", include_in_schema=False)
async def jobs_page(ui: UiDependency, request: Request[Any, Any, Any]) -> Template | Redirect:
    """The jobs page (``?part=live``: only its table, what htmx polls)."""
    query = request.query_params
    params: Params = {name: query.getall(name, []) for name in PARAMS}
    part = query.get("part")
    try:
        view = parse(params)
    except FilterError as exc:
        return _page(part, form=_form(params), error=str(exc), status_code=400)
    if part != LIVE and has_empty_values(params):
        return Redirect(path=view.url(), status_code=302)
    result, following = await read_jobs(ui, view)
    return _page(part, form=_view_form(view), view=view, result=result, following=following)


# Each filter is its own query parameter on purpose: the OpenAPI document describes each;
# the time ones are alike but for their names.
@get("/api/jobs", raises=[ValidationException])
async def jobs_api(
    ui: UiDependency,
    status: Annotated[
        list[JobStatus] | None, QueryParameter(description="Only jobs in these statuses (repeat).")
    ] = None,
    queue: Annotated[
        list[str] | None, QueryParameter(description="Only jobs of these queues (repeat).")
    ] = None,
    actor: Annotated[
        list[str] | None, QueryParameter(description="Only jobs of these actors (repeat).")
    ] = None,
    created_since: Annotated[
        str | None, QueryParameter(description=f"Created at or after: {_TIME_HELP}.")
    ] = None,
    created_until: Annotated[
        str | None, QueryParameter(description=f"Created before: {_TIME_HELP}.")
    ] = None,
    finished_since: Annotated[
        str | None, QueryParameter(description=f"Finished at or after: {_TIME_HELP}.")
    ] = None,
    finished_until: Annotated[
        str | None, QueryParameter(description=f"Finished before: {_TIME_HELP}.")
    ] = None,
    batch: Annotated[UUID | None, QueryParameter(description="Only this batch's children.")] = None,
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description="At most this many jobs.")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, QueryParameter(description="Where the page starts: a page's next_cursor.")
    ] = None,
) -> JobsPage:
    """Jobs newest first, one keyset page at a time (follow ``next_cursor``)."""
    given: dict[str, str | list[str] | None] = {
        "status": None if status is None else [s.value for s in status],
        "queue": queue,
        "actor": actor,
        "created_since": created_since,
        "created_until": created_until,
        "finished_since": finished_since,
        "finished_until": finished_until,
        "batch": None if batch is None else str(batch),
        "limit": str(limit),
        "cursor": cursor,
    }
    params: Params = {
        name: [value] if isinstance(value, str) else value
        for name, value in given.items()
        if value is not None
    }
    try:
        view = parse(params)
    except FilterError as exc:
        raise ValidationException(str(exc)) from None
    result, _ = await read_jobs(ui, view)
    return result


HANDLERS = [jobs_page, jobs_api]
