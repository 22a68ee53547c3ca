"""``/batches``: batches with a row (those enqueued with a failure policy or a finalizer),
newest first, active or ended, with their children's progress; ``/batches/{id}``: one
batch, its children by status (each a link to those jobs), its finalizer and its latest
failed children. A plain tagged batch has no row: it is not listed, but its whole id still
shows its children's counts. ``/api/batches`` and ``/api/batches/{id}`` are the JSON.

The reads are ``taskq batches list|show``'s (``list_batches`` counts the children of each
batch listed along jobs_batch_idx; ``list_batch_jobs`` walks one batch's entries).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal
from urllib.parse import urlencode
from uuid import UUID

from litestar import Response, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery, PathParameter, QueryParameter
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.dashboard.snapshot import BatchDetail
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.pages.job_views import BatchSummary, JobLine
from taskq_cli.ui.render import LIVE, missing, page
from taskq_core.backend.protocol.batches import BatchFilter

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# How many of a batch's latest failed children its page names.
SHOWN_FAILURES = 10

Which = Literal["active", "ended"]


class BatchesView(BaseModel):
    """The newest batches the filter selects; ``more``: older ones match too (a larger
    ``limit`` shows them)."""

    batches: list[BatchSummary]
    count: int
    more: bool


class BatchDetailView(BaseModel):
    """One batch: its progress, its metadata and its latest failed children."""

    batch: BatchSummary
    metadata: dict[str, Any] | None
    failures: list[JobLine]

    @classmethod
    def of(cls, detail: BatchDetail) -> BatchDetailView:
        row = detail.progress.row
        return cls(
            batch=BatchSummary.of(detail.progress),
            metadata=None if row is None else row.metadata,
            failures=[JobLine.of(job) for job in detail.failures],
        )


async def read_batches(ui: Ui, which: Which | None, queue: str | None, limit: int) -> BatchesView:
    """The newest ``limit`` batches (active, ended or both), of ``queue`` when given."""
    active = None if which is None else which == "active"
    # One more than shown, to tell whether more match.
    listed = await ui.source.list_batches(BatchFilter(queue=queue, active=active, limit=limit + 1))
    shown = [BatchSummary.of(progress) for progress in listed[:limit]]
    return BatchesView(batches=shown, count=len(shown), more=len(listed) > limit)


class BatchesFilter(BaseModel):
    """What the list shows: ``status`` active or ended (None: both), of ``queue``, at most
    ``limit``."""

    status: Which | None = None
    queue: str | None = None
    limit: int = DEFAULT_LIMIT

    def url(self, *, part: FromQuery[str | None] = None) -> str:
        """The list's stable URL (``part=live``: its live part)."""
        pairs = [("status", self.status), ("queue", self.queue)]
        if self.limit != DEFAULT_LIMIT:
            pairs.append(("limit", str(self.limit)))
        pairs.append(("part", part))
        query = urlencode([(name, value) for name, value in pairs if value])
        return "/batches" + (f"?{query}" if query else "")


def parse_filter(status: str | None, queue: str | None, limit: str | None) -> BatchesFilter:
    """The list's filter from the query string (empty values: absent); ValueError naming
    the parameter that is wrong."""
    status = (status or "").strip() or None
    if status is not None and status not in ("active", "ended"):
        raise ValueError(f"status: {status!r} is neither active nor ended")
    queue = (queue or "").strip() or None
    if queue is not None and "\x00" in queue:
        raise ValueError("queue: must not contain a NUL character")
    text = (limit or "").strip() or str(DEFAULT_LIMIT)
    if not (text.isascii() and text.isdigit() and len(text) <= 4):
        raise ValueError(f"limit: {text!r} is not a number from 1 to {MAX_LIMIT}")
    if not 1 <= int(text) <= MAX_LIMIT:
        raise ValueError(f"limit: {text!r} is not a number from 1 to {MAX_LIMIT}")
    return BatchesFilter(
        status="active" if status == "active" else "ended" if status else None,
        queue=queue,
        limit=int(text),
    )


# The page's query parameters mirror the other listing's on purpose: litestar reads each
# route's parameters from its own signature.
@get("/batches", include_in_schema=False)
async def batches_page(
    ui: UiDependency,
    part: FromQuery[str | None] = None,
    status: FromQuery[str | None] = None,
    queue: FromQuery[str | None] = None,
    limit: FromQuery[str | None] = None,
) -> Template | Redirect:
    """The batches page (``?part=live``: its live part); a form's empty fields redirect to
    the filter's own URL."""
    try:
        chosen = parse_filter(status, queue, limit)
    except ValueError as exc:
        template = page("batches", part, chosen=None, view=None, error=str(exc))
        template.status_code = 400
        return template
    if part != LIVE and "" in (status, queue, limit):  # a GET form's empty fields
        return Redirect(path=chosen.url(), status_code=302)
    view = await read_batches(ui, chosen.status, chosen.queue, chosen.limit)
    more = None
    if view.more and chosen.limit < MAX_LIMIT:
        more = chosen.model_copy(update={"limit": min(chosen.limit * 4, MAX_LIMIT)}).url()
    return page(
        "batches", part, chosen=chosen, view=view, live_url=chosen.url(part=LIVE), more_url=more
    )


async def read_batch(ui: Ui, ref: str) -> BatchDetailView:
    """One batch by its whole id; ValidationException (not an id), NotFoundException."""
    try:
        batch_id = UUID(ref.strip())
    except ValueError:
        raise ValidationException(f"{ref!r} is not a batch id (a UUID)") from None
    detail = await ui.source.batch_detail(batch_id, SHOWN_FAILURES)
    if detail is None:
        raise NotFoundException(f"no batch with id {batch_id} (no row, no child in the jobs table)")
    return BatchDetailView.of(detail)


@get("/batches/{ref:str}", include_in_schema=False)
async def batch_page(
    ui: UiDependency, ref: FromPath[str], part: FromQuery[str | None] = None
) -> Template | Response[str]:
    """One batch's page (``?part=live``: its live part); 400 for what is not an id, 404
    for an id no batch has."""
    try:
        view = await read_batch(ui, ref)
    except (ValidationException, NotFoundException) as exc:
        return missing("batches", "batch", exc.status_code, exc.detail, part)
    metadata = None
    if view.metadata:
        metadata = json.dumps(view.metadata, indent=2, sort_keys=True, ensure_ascii=False)
    return page("batches_one", part, page="batches", view=view, metadata_text=metadata)


@get("/api/batches", raises=[ValidationException])
async def batches_api(
    ui: UiDependency,
    status: Annotated[
        Which | None, QueryParameter(description="Only active batches, or only ended ones.")
    ] = None,
    queue: Annotated[str | None, QueryParameter(description="Only this queue's batches.")] = None,
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description="At most this many, newest first.")
    ] = DEFAULT_LIMIT,
) -> BatchesView:
    """Batches with a row, newest first, with their children's progress."""
    try:
        chosen = parse_filter(status, queue, str(limit))
    except ValueError as exc:
        raise ValidationException(str(exc)) from None
    return await read_batches(ui, chosen.status, chosen.queue, chosen.limit)


@get("/api/batches/{ref:str}", raises=[ValidationException, NotFoundException])
async def batch_api(
    ui: UiDependency,
    ref: Annotated[str, PathParameter(format="uuid", description="The batch's id.")],
) -> BatchDetailView:
    """One batch by its id: progress, children by status, metadata, latest failures."""
    return await read_batch(ui, ref)


HANDLERS = [batches_page, batch_page, batches_api, batch_api]
