"""``taskq ui serve``: the admin web UI over the configured database.

It binds 127.0.0.1 unless told otherwise and refuses an address beyond loopback without
TASKQ_ADMIN_TOKEN. The first read happens before the server starts, so a wrong DSN or an
unmigrated schema fails as one line with exit 1; later outages show on the pages.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from taskq_cli.database import open_backend
from taskq_cli.options import DsnOption, SchemaOption, load_settings, run_async
from taskq_core.errors import ConfigError

app = typer.Typer(help="The admin web UI.", no_args_is_help=True)

# Requests are served concurrently; the pages' reads are short.
_POOL_MAX_SIZE = 5


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option("--host", help="Address to bind (TASKQ_ADMIN_HOST).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port to bind (TASKQ_ADMIN_PORT)."),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Hide and refuse retry, cancel, pause, resume.")
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Serve the admin web UI: queues, jobs, workers, schedules, batches; JSON under /api/."""
    settings = load_settings(ctx, dsn, schema)
    bind_host = host or settings.admin_host
    bind_port = port or settings.admin_port
    if not is_loopback(bind_host) and not settings.admin_token:
        raise ConfigError(
            f"refusing to serve the admin UI on {bind_host} without TASKQ_ADMIN_TOKEN "
            "(bind 127.0.0.1, or set a token every request must carry)"
        )
    # Imported here so `--help` and shell completion never load the web stack.
    import uvicorn

    from taskq_cli.tui.source import BackendSource, DashboardSettings, JobsFilter
    from taskq_cli.ui.app import create_app
    from taskq_cli.ui.config import UiConfig
    from taskq_core.backend.postgres.connection import describe_dsn
    from taskq_core.explain import ExplainSettings

    async def run() -> None:
        async with open_backend(settings, max_size=_POOL_MAX_SIZE) as backend:
            source = BackendSource(
                backend,
                database=describe_dsn(settings.pooled_dsn),
                schema=settings.schema_name,
                settings=DashboardSettings(explain=ExplainSettings.from_settings(settings)),
            )
            await source.snapshot(JobsFilter())  # fail here, as one line, if it cannot
            config = UiConfig(token=settings.admin_token, read_only=read_only)
            server = uvicorn.Server(
                uvicorn.Config(
                    create_app(source, config),
                    host=bind_host,
                    port=bind_port,
                    log_level="warning",
                    lifespan="on",
                )
            )
            typer.echo(f"taskq ui: serving http://{bind_host}:{bind_port}/", err=True)
            await server.serve()

    run_async(run())
