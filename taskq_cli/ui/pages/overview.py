"""``/``: totals by status, the finished rate, the leader; ``/api/overview`` is its JSON."""

from __future__ import annotations

from datetime import datetime

from litestar import get
from litestar.response import Template
from pydantic import BaseModel

from taskq_cli.tui.source import DashboardSource, JobsFilter, Snapshot
from taskq_cli.ui.config import Ui


class Overview(BaseModel):
    """What the overview shows, read at ``now`` on the database clock."""

    now: datetime
    totals: dict[str, int]
    finished_per_minute: list[int]
    finished_last_minute: int
    leader: str | None
    live_workers: int

    @classmethod
    def of(cls, snapshot: Snapshot) -> Overview:
        leader = snapshot.leader
        return cls(
            now=snapshot.now,
            totals={status.value: n for status, n in snapshot.totals().items()},
            finished_per_minute=snapshot.finished_per_minute,
            finished_last_minute=snapshot.finished_last_minute,
            leader=None if leader is None else f"{leader.row.hostname}:{leader.row.pid}",
            live_workers=sum(1 for w in snapshot.workers if w.state == "running"),
        )


async def _read(source: DashboardSource) -> Overview:
    return Overview.of(await source.snapshot(JobsFilter()))


@get("/", include_in_schema=False)
async def overview_page(ui: Ui, part: str | None = None) -> Template:
    """The overview page, or only its live part (``?part=live``, what htmx polls)."""
    view = await _read(ui.source)
    name = "overview_live.html" if part == "live" else "overview.html"
    return Template(template_name=name, context={"view": view, "page": "overview"})


@get("/api/overview")
async def overview_api(ui: Ui) -> Overview:
    """Totals by status, finished jobs per minute, the leader and the live workers."""
    return await _read(ui.source)


HANDLERS = [overview_page, overview_api]
