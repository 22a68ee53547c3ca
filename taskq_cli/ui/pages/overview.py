"""``/``: is work flowing? Totals by status, jobs finished per minute, the leader, the
workers, and alerts (no leader, a stranded queue, a stale worker, a paused queue, a limit
used up). ``/api/overview`` is its JSON."""

from __future__ import annotations

from datetime import datetime

from litestar import get
from litestar.params import FromQuery
from litestar.response import Template
from pydantic import BaseModel

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.ui.alerts import AlertKind, Severity, alerts, worker_name
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.render import page

# The average finish rate covers this many of the last minutes (as taskq top's header).
RATE_MINUTES = 5


class AlertView(BaseModel):
    """Something to look at: ``kind`` (no_leader, stale_leader, stranded_queue,
    stale_worker, paused_queue, limit_full), how bad, what it is about, in words."""

    kind: AlertKind
    severity: Severity
    subject: str
    message: str


class LeaderView(BaseModel):
    """The maintenance leader: its name, its worker id and whether it is alive."""

    name: str
    worker_id: str
    state: str


class WorkerCounts(BaseModel):
    """How many workers are running, stale (silent too long) and recently stopped."""

    running: int
    stale: int
    stopped: int


class Overview(BaseModel):
    """What the overview shows, read at ``now`` on the database clock. ``totals``: the
    waiting and running jobs now, and the finished ones within ``window_seconds``."""

    now: datetime
    window_seconds: float
    totals: dict[str, int]
    claimed: int  # claimed ahead of a free consumer (totals' running counts running bodies)
    finished_per_minute: list[int]
    finished_last_minute: int
    finished_rate: float
    oldest_pending_at: datetime | None
    leader: LeaderView | None
    workers: WorkerCounts
    alerts: list[AlertView]

    @classmethod
    def of(cls, snapshot: Snapshot) -> Overview:
        leader = snapshot.leader
        states = [view.state for view in snapshot.workers]
        oldest = [q.oldest_pending_at for q in snapshot.queues if q.oldest_pending_at]
        return cls(
            now=snapshot.now,
            window_seconds=snapshot.window.total_seconds(),
            totals={status.value: n for status, n in snapshot.totals().items()},
            claimed=snapshot.claimed(),
            finished_per_minute=snapshot.finished_per_minute,
            finished_last_minute=snapshot.finished_last_minute,
            finished_rate=round(snapshot.finished_rate(RATE_MINUTES), 2),
            oldest_pending_at=min(oldest, default=None),
            leader=None
            if leader is None
            else LeaderView(
                name=worker_name(leader.row), worker_id=str(leader.row.id), state=leader.state
            ),
            workers=WorkerCounts(
                running=states.count("running"),
                stale=states.count("stale"),
                stopped=states.count("stopped"),
            ),
            alerts=[
                AlertView(kind=a.kind, severity=a.severity, subject=a.subject, message=a.message)
                for a in alerts(snapshot)
            ],
        )


async def read_overview(ui: Ui) -> Overview:
    """One snapshot, as the overview shows it."""
    return Overview.of(await ui.snapshot())


# The page and its /api twin mirror the other snapshot pages' on purpose: litestar reads
# each route from its own handler, and the API's docstring is its description there.
@get("/", include_in_schema=False)
async def overview_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The overview page, or only its live part (``?part=live``, what htmx polls)."""
    return page("overview", part, view=await read_overview(ui))


@get("/api/overview")
async def overview_api(ui: UiDependency) -> Overview:
    """Totals by status, finished jobs per minute, the leader, the workers and the alerts."""
    return await read_overview(ui)


HANDLERS = [overview_page, overview_api]
