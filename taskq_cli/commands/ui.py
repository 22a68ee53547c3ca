"""``taskq ui serve``: the admin web UI over the configured database.

It binds 127.0.0.1 unless told otherwise and refuses an address beyond loopback without
TASKQ_ADMIN_TOKEN, and a token that is short or easy to guess (taskq_cli/ui/sign_ins.py).
Besides the pages and /api it serves the fleet metrics at /metrics (as ``taskq metrics
serve`` does). uvicorn runs with the limits of taskq_cli/ui/serving.py (request deadlines,
a connection cap, sizes), and what clients can make it log is bounded (log_budget.py).
The port is taken, and the first read made, before anything is served, so a port in use,
a wrong DSN or an unmigrated schema fails as one line with exit 1; later outages show on
the pages. SIGINT or SIGTERM stops it cleanly (exit 0).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import signal
import socket
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from taskq_cli.options import DsnOption, SchemaOption, load_settings, run_async
from taskq_cli.ui.sign_ins import token_weakness
from taskq_core.errors import ConfigError

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(help="The admin web UI.", no_args_is_help=True)

# Requests are served concurrently; the pages' reads are short.
_POOL_MAX_SIZE = 5
_BIND_REASONS = {
    errno.EADDRINUSE: "address already in use (choose another --port or TASKQ_ADMIN_PORT)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "no such address on this machine",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def display_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not listening yet); ConfigError with one line when
    the address cannot be had."""
    where = display_address(host, port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {where}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = _BIND_REASONS.get(exc.errno or 0, exc.strerror or str(exc))
        raise ConfigError(f"cannot listen on {where}: {reason}") from None
    return sock


def _ignore(signum: int, frame: Any) -> None:
    """uvicorn raises the signal that stopped it again after serving: by then it is done."""


@contextlib.contextmanager
def _signals_stop_serving() -> Iterator[None]:
    """While uvicorn serves, its handlers turn SIGINT and SIGTERM into a graceful stop; this
    keeps the re-raised signal from killing the process before the pool is closed."""
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
    token = settings.admin_token
    weakness = None if token is None else token_weakness(token)
    if weakness is not None:
        raise ConfigError(weakness)
    if not is_loopback(bind_host) and not token:
        raise ConfigError(
            f"refusing to serve the admin UI on {bind_host} without TASKQ_ADMIN_TOKEN "
            "(bind 127.0.0.1, or set a token every request must carry)"
        )
    sock = bind_socket(bind_host, bind_port)  # before the imports: a port in use fails fast
    # Imported here so `--help` and shell completion never load the web stack.
    import uvicorn

    from taskq_cli.commands.top import open_dashboard_source
    from taskq_cli.ui.app import create_app
    from taskq_cli.ui.config import LOOPBACK_NAMES, UiConfig, dashboard_settings
    from taskq_cli.ui.log_budget import (
        LogBudget,
        bound_client_driven_logs,
        unbound_client_driven_logs,
    )
    from taskq_cli.ui.serving import ServeLimits, connection_limit, uvicorn_config
    from taskq_core.explain import ExplainSettings
    from taskq_core.liveness import worker_stale_after
    from taskq_core.obs.fleet import FleetMetrics, FleetSettings

    public_url = settings.admin_url if "admin_url" in settings.model_fields_set else None
    config = UiConfig(
        token=token,
        read_only=read_only,
        public_url=public_url,
        trusted_hosts=LOOPBACK_NAMES | {bind_host.lower()},
    )
    dashboard = dashboard_settings(ExplainSettings.from_settings(settings))
    limits = ServeLimits(connections=connection_limit())
    budget = LogBudget()
    budget_filter = bound_client_driven_logs(budget)

    async def run() -> None:
        try:
            async with open_dashboard_source(
                settings, dashboard, max_size=_POOL_MAX_SIZE
            ) as source:
                # /metrics: the fleet's queue-level metrics (taskq metrics serve's defaults).
                fleet = FleetMetrics(
                    source.backend, FleetSettings(stale_after=worker_stale_after(settings))
                )
                app = create_app(source, config, metrics=fleet)
                server = uvicorn.Server(uvicorn_config(app, limits, budget))
                where = display_address(bind_host, bind_port)
                reached = f" (reached at {public_url})" if public_url else ""
                typer.echo(f"taskq ui: serving http://{where}/{reached}", err=True)
                with _signals_stop_serving():
                    await server.serve(sockets=[sock])
        finally:
            unbound_client_driven_logs(budget_filter)
            sock.close()

    run_async(run())
