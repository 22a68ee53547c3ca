"""``/workers``: who is alive, who went silent, who stopped lately, who leads and how busy
each one is (taskq top's workers pane). Live workers first, then stale ones (silent past
the threshold: isolated or dead, maybe holding jobs until they are reclaimed), then the
ones stopped within the last hour. ``/api/workers`` is the JSON.

A stale worker's silence can be acknowledged (``POST /workers/{id}/ack``, the row's button;
``POST /api/workers/{id}/ack``): its alert goes, recorded with the operator, until it is heard
from again (``taskq workers ack``). Refused in read-only mode like every action."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from litestar import Request, get, post
from litestar.exceptions import ClientException, NotFoundException, PermissionDeniedException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.dashboard.snapshot import Snapshot, WorkerView
from taskq_cli.output import worker_load
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.render import back_to, is_htmx, page
from taskq_core.worker_alerts import WorkerAckOutcome


class WorkerItem(BaseModel):
    """One worker: ``state`` is running, stale or stopped by its heartbeat; ``load`` is
    ``running/concurrency`` (plus jobs claimed ahead of a free consumer)."""

    id: str
    label: str | None
    hostname: str
    pid: int
    workgroup: str | None
    state: str
    is_leader: bool
    queues: list[str]
    actors: list[str]
    concurrency: int
    running_jobs: int
    claimed_jobs: int
    load: str
    version: str | None
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    # How its process ended, as its workgroup supervisor saw it (both None: nobody saw it).
    exit_code: int | None = None
    exit_signal: str | None = None
    # A stale worker whose silence an operator acknowledged: it raises no alert.
    acknowledged: bool = False
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None

    # Alike job_views.ProgressView.of by shape only: each copies its own record's fields
    # into its model.
    @classmethod
    def of(cls, view: WorkerView) -> WorkerItem:
        row = view.row
        return cls(
            id=str(row.id),
            label=row.label,
            hostname=row.hostname,
            pid=row.pid,
            workgroup=row.workgroup_instance,
            state=view.state,
            is_leader=row.is_leader,
            queues=row.queues,
            actors=row.actors,
            concurrency=row.concurrency,
            running_jobs=row.running_jobs,
            claimed_jobs=row.claimed_jobs,
            load=worker_load(row.running_jobs, row.claimed_jobs, row.concurrency),
            version=row.version,
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            stopped_at=row.stopped_at,
            exit_code=row.exit_code,
            exit_signal=row.exit_signal,
            acknowledged=view.acknowledged,
            acknowledged_at=row.acknowledged_at,
            acknowledged_by=row.acknowledged_by,
        )


class WorkersView(BaseModel):
    """The workers at ``now`` (database clock); silent past ``stale_after_seconds`` is
    stale."""

    now: datetime
    stale_after_seconds: float
    running: int
    stale: int
    stopped: int
    workers: list[WorkerItem]


def _view(snapshot: Snapshot) -> WorkersView:
    states = [view.state for view in snapshot.workers]
    return WorkersView(
        now=snapshot.now,
        stale_after_seconds=snapshot.stale_after.total_seconds(),
        running=states.count("running"),
        stale=states.count("stale"),
        stopped=states.count("stopped"),
        workers=[WorkerItem.of(view) for view in snapshot.workers],
    )


# The reader, the page and its /api twin mirror the other snapshot pages' on purpose
# (limits.py, overview.py): each reads one snapshot into its own view, and litestar reads
# each route from its own handler (the API's docstring is its description there).
async def read_workers(ui: Ui) -> WorkersView:
    """One snapshot, as the workers page shows it."""
    return _view(await ui.snapshot())


@get("/workers", include_in_schema=False)
async def workers_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The workers page, or only its live part (``?part=live``)."""
    return page("workers", part, view=await read_workers(ui))


@get("/api/workers")
async def workers_api(ui: UiDependency) -> WorkersView:
    """Running, stale and recently stopped workers, with the leader and their load."""
    return await read_workers(ui)


class WorkerAckResult(BaseModel):
    """What acknowledging did (``acknowledged``, or ``already_acknowledged`` kept as it was;
    ``stopped``: it raises no alert) and the worker after."""

    outcome: WorkerAckOutcome
    worker: WorkerItem


async def _acknowledge(ui: Ui, worker_id: UUID) -> WorkerAckOutcome:
    """Acknowledge the worker's silence as judged at a fresh snapshot's time: 404 when it
    has no row, 409 when it is running (nothing to acknowledge)."""
    if ui.config.read_only:  # the security middleware refuses first; never act regardless
        raise PermissionDeniedException("this admin UI is read-only (taskq ui serve --read-only)")
    snapshot = await ui.snapshot()
    done = await ui.source.acknowledge_worker(worker_id, snapshot.now)
    if done.outcome == "not_found":
        raise NotFoundException(f"no worker with id {worker_id}")
    if done.outcome == "running":
        raise ClientException(
            f"worker {worker_id} is running: only a stale worker's alert can be acknowledged",
            status_code=409,
        )
    return done.outcome


@post("/workers/{worker_id:uuid}/ack", include_in_schema=False, status_code=200)
async def ack_action(
    ui: UiDependency, request: Request[Any, Any, Any], worker_id: FromPath[UUID]
) -> Template | Redirect:
    """Acknowledge a stale worker's silence: its alert goes until it is heard from again."""
    await _acknowledge(ui, worker_id)
    if is_htmx(request):
        return page("workers", "live", view=await read_workers(ui))
    return back_to("/workers")


@post(
    "/api/workers/{worker_id:uuid}/ack",
    status_code=200,
    raises=[NotFoundException, ClientException, PermissionDeniedException],
)
async def ack_api(ui: UiDependency, worker_id: FromPath[UUID]) -> WorkerAckResult:
    """Acknowledge a stale worker's silence (404: no such worker; 409: it is running)."""
    outcome = await _acknowledge(ui, worker_id)
    view = await read_workers(ui)
    shown = next((w for w in view.workers if w.id == str(worker_id)), None)
    if shown is None:  # stopped more than an hour ago: the page no longer lists it
        raise NotFoundException(f"worker {worker_id} is no longer listed")
    return WorkerAckResult(outcome=outcome, worker=shown)


HANDLERS = [workers_page, workers_api, ack_action, ack_api]
