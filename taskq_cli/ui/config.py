"""What one ``taskq ui serve`` process was started with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

from litestar.di import NamedDependency

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.dashboard.source import DashboardSettings, DashboardSource

# At run time: Litestar resolves the handlers' hints.
from taskq_cli.ui.actions import DEFAULT_CANCEL_REASON, OperatorActions, web_ui_operator
from taskq_cli.ui.sign_ins import SignIns
from taskq_core.backend.protocol import ScheduleRecord
from taskq_core.backend.protocol.workflows import WorkflowFilter, WorkflowRow, WorkflowStep
from taskq_core.explain import ExplainSettings

# The htmx build vendored in static/ (its licence beside it): templates load it by this name.
HTMX_FILE = "htmx-2.0.11.min.js"
# How often a page's live part is fetched again.
DEFAULT_REFRESH_SECONDS = 2.0
# Host names that reach a loopback bind; without a token only these (and the public URL's
# host) are answered, so a page elsewhere cannot rebind its own name to 127.0.0.1 and read us.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# A read that takes longer counts as the database being away (the page says so).
DEFAULT_READ_TIMEOUT = 5.0
# How long a login lasts before the form asks for the token again.
DEFAULT_SESSION_LIFETIME = timedelta(hours=12)

T = TypeVar("T")


@dataclass(frozen=True)
class UiConfig:
    """The server's options.

    ``token``: what every request must carry (None: none asked). ``read_only``: actions
    hidden and refused. ``public_url``: TASKQ_ADMIN_URL when set, the address users reach
    the UI at (a reverse proxy's): its host and origin are trusted like the server's own.
    ``trusted_hosts``: the Host names answered when there is no token. ``read_timeout``:
    how long a page waits for the database before it says it is unreachable.
    """

    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    public_url: str | None = None
    trusted_hosts: frozenset[str] = LOOPBACK_NAMES
    session_lifetime: timedelta = DEFAULT_SESSION_LIFETIME
    read_timeout: float = DEFAULT_READ_TIMEOUT

    @property
    def public_origin(self) -> str | None:
        """``scheme://host[:port]`` of ``public_url``."""
        if not self.public_url:
            return None
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}".lower()

    @property
    def hosts(self) -> frozenset[str]:
        """Every Host name answered without a token: the trusted ones and the public URL's."""
        public = urlsplit(self.public_url).hostname if self.public_url else None
        return self.trusted_hosts | ({public.lower()} if public else set())


def dashboard_settings(explain: ExplainSettings | None = None) -> DashboardSettings:
    """The read model's settings in the web UI: its pause notes say they came from it
    (paused by ``user@host (web UI)``, the user and host the server runs as: the token names
    no person), as the UI's own writes do (actions.py)."""
    return DashboardSettings(
        explain=explain or ExplainSettings(),
        cancel_reason=DEFAULT_CANCEL_REASON,
        operator=web_ui_operator(),
    )


class ScheduleReader(Protocol):
    """Where the schedules page reads the cron schedules (any Backend is one)."""

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        """Schedules by name."""


class WorkflowReader(Protocol):
    """Where the workflow pages read workflows and their steps (any Backend is one)."""

    async def get_workflow(self, workflow_id: UUID) -> WorkflowRow | None:
        """One workflow with its steps' counts."""

    async def list_workflows(self, filter: WorkflowFilter) -> list[WorkflowRow]:
        """Workflows newest first."""

    async def list_workflow_steps(self, workflow_id: UUID) -> list[WorkflowStep]:
        """A workflow's steps in the order they were added."""


class MetricsExposition(Protocol):
    """The fleet metrics in Prometheus' text format (taskq_core.obs.fleet.FleetMetrics)."""

    async def exposition(self, accept: str | None = None) -> tuple[str, bytes]:
        """(content type, body) for a scrape that sent ``accept``."""


@dataclass(frozen=True)
class Ui:
    """What every handler gets (the ``ui`` dependency): the read model, the schedules, the
    operator's writes (each recorded with who and why), the workflows, the fleet metrics
    (None: not served), the options, and the token's checks and sessions (None: no token).

    A concrete class rather than the DashboardSource protocol itself, which Litestar's
    signature check cannot test instances against."""

    source: DashboardSource
    config: UiConfig
    schedules: ScheduleReader
    actions: OperatorActions
    workflows: WorkflowReader
    metrics: MetricsExposition | None = None
    sign_ins: SignIns | None = None

    async def snapshot(self, jobs: JobsFilter | None = None) -> Snapshot:
        """One dashboard snapshot (TimeoutError past ``read_timeout``: an outage)."""
        read = self.source.snapshot(jobs or JobsFilter())
        return await asyncio.wait_for(read, self.config.read_timeout)

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every cron schedule (TimeoutError past ``read_timeout``)."""
        return await self.read(self.schedules.list_schedules())

    async def read(self, read: Awaitable[T]) -> T:
        """``read``'s value (TimeoutError past ``read_timeout``: an outage); the replica's
        staleness, which every page shows when the reads go to one, is read beside it."""
        value, _ = await asyncio.wait_for(
            asyncio.gather(read, self.source.staleness()), self.config.read_timeout
        )
        return value


# How a handler asks for the ``ui`` dependency (named explicitly, as Litestar 3 requires).
UiDependency: TypeAlias = NamedDependency[Ui]
