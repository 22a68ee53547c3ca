"""``taskq top``: the live dashboard (queues, workers, recent failures; cancel, retry, pause).

One refresh reads the database before the screen opens, so a wrong DSN or an unmigrated
schema fails as a one-line error with exit 1 like every other command; after that, outages
show as a banner inside the dashboard while it keeps retrying. ``q`` quits with exit 0.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from taskq_cli.dashboard.limit_store import redis_limit_store
from taskq_cli.database import open_backend
from taskq_cli.options import DsnOption, SchemaOption, load_settings, run_async
from taskq_core.errors import ConfigError
from taskq_core.explain import ExplainSettings

if TYPE_CHECKING:
    from taskq_cli.dashboard.source import BackendSource, DashboardSettings
    from taskq_core.settings import TaskqSettings

RefreshOption = Annotated[
    float,
    typer.Option(
        "--refresh",
        min=0.2,
        help="Seconds between refreshes.",
        metavar="SECONDS",
        show_default=True,
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.5,
        help="Seconds one refresh may take before the dashboard reports the database unreachable.",
        metavar="SECONDS",
        show_default=True,
    ),
]


def top(
    ctx: typer.Context,
    refresh: RefreshOption = 1.0,
    timeout: TimeoutOption = 5.0,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Live dashboard: queues, workers and recent failures; cancel, retry, pause from it."""
    settings = load_settings(ctx, dsn, schema)
    # Imported here so `--help` and shell completion never load Textual.
    from taskq_cli.dashboard.source import DashboardSettings
    from taskq_cli.tui.app import TopApp

    dashboard = DashboardSettings(explain=ExplainSettings.from_settings(settings))

    async def run() -> None:
        async with open_dashboard_source(settings, dashboard) as source:
            if not (sys.stdin.isatty() and sys.stdout.isatty()):
                raise ConfigError("taskq top needs a terminal (stdin and stdout are not a TTY)")
            await TopApp(source, refresh=refresh, timeout=timeout).run_async()

    run_async(run())


@asynccontextmanager
async def open_dashboard_source(
    settings: TaskqSettings, dashboard: DashboardSettings, *, max_size: int | None = None
) -> AsyncIterator[BackendSource]:
    """The dashboard's read model for one run (``top``, ``ui serve``): a backend of
    ``max_size`` connections and the Redis limit store when one is set, both closed on exit.
    With TASKQ_PG_DSN_REPLICA, the reads go to the replica (a backend of its own) and the
    operator's writes to the primary. Its first snapshot is read here, so a database that
    cannot answer fails as one line."""
    from taskq_cli.dashboard.filters import JobsFilter
    from taskq_cli.dashboard.source import BackendSource
    from taskq_cli.replica import StalenessWatch
    from taskq_core.backend.factory import describe_dsn

    limit_store = redis_limit_store(settings)
    replica = settings.pg_dsn_replica
    try:
        async with AsyncExitStack() as stack:
            backend = await stack.enter_async_context(open_backend(settings, max_size=max_size))
            source = BackendSource(
                backend,
                database=describe_dsn(settings.pooled_dsn),
                schema=settings.schema_name,
                settings=dashboard,
                limit_store=limit_store,
            )
            if replica is not None:
                reader = open_backend(settings, max_size=max_size, read=True)
                source.backend = await stack.enter_async_context(reader)
                source.writer = backend
                source.database = describe_dsn(replica)
                source.replica = StalenessWatch(source.backend, source.database)
            await source.snapshot(JobsFilter())
            yield source
    finally:
        if limit_store is not None:
            await limit_store.close()
