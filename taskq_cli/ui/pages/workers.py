"""``/workers``: who is alive, who went silent, who stopped lately, who leads and how busy
each one is (taskq top's workers pane). Live workers first, then stale ones (silent past
the threshold: isolated or dead, maybe holding jobs until they are reclaimed), then the
ones stopped within the last hour. ``/api/workers`` is the JSON."""

from __future__ import annotations

from datetime import datetime

from litestar import get
from litestar.params import FromQuery
from litestar.response import Template
from pydantic import BaseModel

from taskq_cli.dashboard.snapshot import Snapshot, WorkerView
from taskq_cli.output import worker_load
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.render import page


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


HANDLERS = [workers_page, workers_api]
