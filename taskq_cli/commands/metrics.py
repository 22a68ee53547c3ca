"""``taskq metrics serve``: the fleet's queue-level metrics as a Prometheus scrape target.

One process serves the whole fleet (not one per worker): ``/metrics`` reports what the
database holds (jobs by queue, actor and status, the oldest pending job, throughput, failure
ratio, start latency, live workers, paused queues), read at most once per ``--interval``
however many scrapers ask. The first read happens before the server listens, so a wrong DSN
or an unmigrated schema is a one-line error with exit 1; after that a database outage is
``taskq_fleet_up 0`` until it is back. SIGINT or SIGTERM stops it with exit 0. What each
metric means: docs/fleet-metrics.md.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Annotated

import typer

from taskq_cli import inputs
from taskq_cli.database import open_backend
from taskq_cli.options import DsnOption, SchemaOption, load_settings, run_async

# Clear of 9464, the OpenTelemetry Prometheus exporter's default, which a worker may use.
DEFAULT_PORT = 9469

app = typer.Typer(
    help="Fleet metrics for Prometheus: queue depth, backlog age, throughput, failures.",
    no_args_is_help=True,
)


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on.", show_default=True)
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option("--port", min=1, max=65535, help="Port to listen on.", show_default=True),
    ] = DEFAULT_PORT,
    window: Annotated[
        str,
        typer.Option(
            "--window",
            help="Span of the finished counts, throughput, failure ratio and start latency "
            "(30s, 5m, 1h); a read costs more the more jobs finish within it.",
            metavar="D",
            show_default=True,
        ),
    ] = "5m",
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            min=0.5,
            help="Seconds a read is served to every scrape before the database is read again.",
            metavar="SECONDS",
            show_default=True,
        ),
    ] = 5.0,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.5,
            help="Seconds one read may take before the metrics report the database away.",
            metavar="SECONDS",
            show_default=True,
        ),
    ] = 10.0,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Serve /metrics for Prometheus until stopped.

    The fleet's queue-level metrics on http://HOST:PORT/metrics, read from the database (a
    replica's, with its lag, when TASKQ_PG_DSN_REPLICA is set) at most once per --interval;
    SIGINT or SIGTERM ends it with exit 0.
    """
    span = inputs.parse_duration_option(window, "--window")
    if span.total_seconds() <= 0:
        raise typer.BadParameter("must be longer than 0s", param_hint="--window")
    settings = load_settings(ctx, dsn, schema)
    # Imported here so `--help` and completion never load prometheus_client.
    from taskq_core.liveness import worker_stale_after
    from taskq_core.obs.fleet import FleetMetrics, FleetSettings
    from taskq_core.obs.fleet_server import FleetServer

    fleet = FleetSettings(
        window=span,
        min_interval=interval,
        read_timeout=timeout,
        stale_after=worker_stale_after(settings),
    )

    async def run() -> None:
        async with open_backend(settings, read=True) as backend:
            await backend.get_fleet_stats(span)  # fail here, as one line, if it cannot read
            server = FleetServer(FleetMetrics(backend, fleet), host, port)
            await server.start()
            try:
                sys.stdout.write(f"serving fleet metrics on {server.url}\n")
                sys.stdout.flush()
                await _until_stopped()
            finally:
                await server.stop()

    run_async(run())


async def _until_stopped() -> None:
    """Return at the first SIGINT or SIGTERM."""
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    try:
        await stopped.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
