"""``/limits``: each rate limit and reservation the workers declared, its rule, and its use
now (tokens spent of the burst, uses within the window, slots held), one row per instance
(a keyed limit shows its busiest keys), as taskq top's limits pane. A limit whose state
lives in Redis shows its use when the server reads Redis (TASKQ_REDIS_URL), else as
unknown. ``/api/limits`` is the JSON."""

from __future__ import annotations

from datetime import datetime

from litestar import get
from litestar.params import FromQuery
from litestar.response import Template
from pydantic import BaseModel

from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.ui.config import Ui, UiDependency
from taskq_cli.ui.render import page
from taskq_core.backend.protocol import LimitUsage

_UNITS = {"token_bucket": "tokens", "sliding_window": "uses", "reservation": "slots"}


class LimitView(BaseModel):
    """One instance of a limit. ``kind``: token_bucket, sliding_window or reservation;
    ``capacity``: the burst, the window's limit or the slots; ``used`` None: unknown (kept
    in Redis, not read); ``share``: used as a share of capacity (0 to 1)."""

    name: str
    instance: str
    kind: str
    rule: str
    capacity: float
    used: float | None
    unit: str
    share: float | None
    store: str
    keyed: bool

    # Alike job_views.BatchSummary by shape only: fields, then an ``of`` copying its own record's.
    @classmethod
    def of(cls, usage: LimitUsage) -> LimitView:
        limit = usage.limit
        return cls(
            name=limit.name,
            instance=usage.instance,
            kind=limit.kind,
            rule=limit.rule(),
            capacity=limit.capacity,
            used=usage.used,
            unit=_UNITS[limit.kind],
            share=usage.share,
            store=limit.store,
            keyed=limit.keyed,
        )


class LimitsView(BaseModel):
    """Every declared limit's instances at ``now`` (database clock)."""

    now: datetime
    limits: list[LimitView]


def _view(snapshot: Snapshot) -> LimitsView:
    return LimitsView(now=snapshot.now, limits=[LimitView.of(u) for u in snapshot.limits])


# The reader, the page and its /api twin mirror the other snapshot pages' on purpose
# (workers.py, overview.py): each reads one snapshot into its own view, and litestar reads
# each route from its own handler (the API's docstring is its description there).
async def read_limits(ui: Ui) -> LimitsView:
    """One snapshot, as the limits page shows it."""
    return _view(await ui.snapshot())


@get("/limits", include_in_schema=False)
async def limits_page(ui: UiDependency, part: FromQuery[str | None] = None) -> Template:
    """The limits page, or only its live part (``?part=live``)."""
    return page("limits", part, view=await read_limits(ui))


@get("/api/limits")
async def limits_api(ui: UiDependency) -> LimitsView:
    """Rate limits and reservations and their use now."""
    return await read_limits(ui)


HANDLERS = [limits_page, limits_api]
