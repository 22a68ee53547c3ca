"""``/workflows``: workflows newest first, with their steps counted by status, filtered by
status; ``/workflows/{id}``: one workflow, its graph (drawn by the server as SVG:
workflow_graph.py) and its steps, each a link to its job. ``/api/workflows`` and
``/api/workflows/{id}`` are the JSON. An id that is no workflow's, or no id at all, answers
404 (the page saying so).

The reads are ``taskq workflows list|show``'s (the backend's ``list_workflows``,
``get_workflow``, ``list_workflow_steps``). A step's job page names its workflow from the
read model's ``JobDetail.workflow`` (``jobs show``'s, job_views.JobWorkflowView).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal
from urllib.parse import urlencode
from uuid import UUID

from litestar import Response, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery, PathParameter, QueryParameter
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.pages.workflow_views import WorkflowDetailView, WorkflowSummary, WorkflowsView
from taskq_cli.ui.paths import path_segment
from taskq_cli.ui.render import LIVE, missing, page
from taskq_cli.ui.workflow_graph import MAX_DRAWN, layout
from taskq_core.backend.protocol.workflows import WorkflowFilter, WorkflowStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# The most steps a workflow's page lists (its JSON lists them all).
MAX_LISTED = 500

Status = Literal["running", "succeeded", "failed", "cancelled"]
STATUSES: tuple[str, ...] = tuple(status.value for status in WorkflowStatus)


class WorkflowsFilter(BaseModel):
    """What the list shows: workflows in ``status`` (None: any), at most ``limit``."""

    status: Status | None = None
    limit: int = DEFAULT_LIMIT

    def url(self, *, part: str | None = None) -> str:
        """The list's stable URL (``part=live``: its live part)."""
        pairs: list[tuple[str, str | None]] = [("status", self.status)]
        if self.limit != DEFAULT_LIMIT:
            pairs.append(("limit", str(self.limit)))
        pairs.append(("part", part))
        query = urlencode([(name, value) for name, value in pairs if value])
        return "/workflows" + (f"?{query}" if query else "")


def parse_filter(status: str | None, limit: str | None) -> WorkflowsFilter:
    """The list's filter from the query string (empty values: absent); ValueError naming
    the parameter that is wrong."""
    status = (status or "").strip() or None
    if status is not None and status not in STATUSES:
        raise ValueError(f"status: {status!r} is none of {', '.join(STATUSES)}")
    text = (limit or "").strip() or str(DEFAULT_LIMIT)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LIMIT):
        raise ValueError(f"limit: {text!r} is not a number from 1 to {MAX_LIMIT}")
    return WorkflowsFilter.model_validate({"status": status, "limit": int(text)})


async def read_workflows(ui: Ui, chosen: WorkflowsFilter) -> WorkflowsView:
    """The newest ``chosen.limit`` workflows in ``chosen.status``."""
    status = None if chosen.status is None else WorkflowStatus(chosen.status)
    # One more than shown, to tell whether more match.
    listed = await ui.read(
        ui.workflows.list_workflows(WorkflowFilter(status=status, limit=chosen.limit + 1))
    )
    shown = [WorkflowSummary.of(row) for row in listed[: chosen.limit]]
    return WorkflowsView(workflows=shown, count=len(shown), more=len(listed) > chosen.limit)


# The page's query parameters mirror the other listing's on purpose: litestar reads each
# route's parameters from its own signature.
@get("/workflows", include_in_schema=False)
async def workflows_page(
    ui: UiDependency,
    part: FromQuery[str | None] = None,
    status: FromQuery[str | None] = None,
    limit: FromQuery[str | None] = None,
) -> Template | Redirect:
    """The workflows page (``?part=live``: its live part); a form's empty fields redirect
    to the filter's own URL."""
    try:
        chosen = parse_filter(status, limit)
    except ValueError as exc:
        template = page("workflows", part, chosen=None, view=None, error=str(exc))
        template.status_code = 400
        return template
    if part != LIVE and "" in (status, limit):  # a GET form's empty fields
        return Redirect(path=chosen.url(), status_code=302)
    view = await read_workflows(ui, chosen)
    more = None
    if view.more and chosen.limit < MAX_LIMIT:
        more = chosen.model_copy(update={"limit": min(chosen.limit * 4, MAX_LIMIT)}).url()
    return page(
        "workflows",
        part,
        chosen=chosen,
        view=view,
        statuses=STATUSES,
        live_url=chosen.url(part=LIVE),
        more_url=more,
    )


async def read_workflow(ui: Ui, ref: str) -> WorkflowDetailView:
    """One workflow by its id, with its steps; NotFoundException for what is no
    workflow's id (not an id at all included)."""
    try:
        workflow_id = UUID(ref.strip())
    except ValueError:
        raise NotFoundException(f"no workflow with id {ref!r} (not a UUID)") from None
    row, steps = await ui.read(
        asyncio.gather(
            ui.workflows.get_workflow(workflow_id),
            ui.workflows.list_workflow_steps(workflow_id),
        )
    )
    if row is None:
        raise NotFoundException(f"no workflow with id {workflow_id}")
    return WorkflowDetailView.of(row, steps)


@get("/workflows/{ref:str}", include_in_schema=False)
async def workflow_page(
    ui: UiDependency, ref: FromPath[str], part: FromQuery[str | None] = None
) -> Template | Response[str]:
    """One workflow's page (``?part=live``: its live part); 404 for what is no
    workflow's id."""
    try:
        view = await read_workflow(ui, ref)
    except NotFoundException as exc:
        return missing("workflows", "workflow", 404, exc.detail, part)
    steps = view.steps
    return page(
        "workflows_one",
        part,
        page="workflows",
        view=view,
        graph=layout(steps) if steps and len(steps) <= MAX_DRAWN else None,
        max_drawn=MAX_DRAWN,
        listed=steps[:MAX_LISTED],
        metadata_text=json.dumps(view.metadata, indent=2, sort_keys=True, ensure_ascii=False)
        if view.metadata
        else None,
    )


@get("/api/workflows", raises=[ValidationException])
async def workflows_api(
    ui: UiDependency,
    status: Annotated[
        Status | None, QueryParameter(description="Only the workflows in this status.")
    ] = None,
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description="At most this many, newest first.")
    ] = DEFAULT_LIMIT,
) -> WorkflowsView:
    """Workflows newest first, with their steps counted by status."""
    try:
        chosen = parse_filter(status, str(limit))
    except ValueError as exc:
        raise ValidationException(str(exc)) from None
    return await read_workflows(ui, chosen)


@get("/api/workflows/{ref:str}", raises=[NotFoundException])
async def workflow_api(
    ui: UiDependency,
    ref: Annotated[str, PathParameter(format="uuid", description="The workflow's id.")],
) -> WorkflowDetailView:
    """One workflow: its status, its steps' counts, its metadata, and every step (its job,
    status, attempt, dependencies by name, error or cancel reason) in the order added."""
    return await read_workflow(ui, ref)


async def workflow_path(ui: Ui, ident: UUID) -> str | None:
    """The page of workflow ``ident``, when a workflow has that id."""
    row = await ui.read(ui.workflows.get_workflow(ident))
    return None if row is None else f"/workflows/{path_segment(ident)}"


HANDLERS = [workflows_page, workflow_page, workflows_api, workflow_api]
