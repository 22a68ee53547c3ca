"""``taskq health live|ready|metrics``: exec probes for a worker's health server.

Which socket: ``--socket PATH``, else ``--pid PID`` (the TASKQ_HEALTH_SOCKET_PATH that worker
was started with, as a workgroup child is, else its socket in the runtime directory), else
TASKQ_HEALTH_SOCKET_PATH, else the one live worker's socket found in the runtime directory
(``$XDG_RUNTIME_DIR/taskq`` or ``/tmp/taskq-<uid>``). Finding none, or several, is an error
that says what to pass. ``--port PORT`` asks a worker's TCP health port (TASKQ_HEALTH_PORT)
instead, on TASKQ_HEALTH_HOST (127.0.0.1 when that is a wildcard).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from taskq_cli.options import DsnOption, SchemaOption, load_settings
from taskq_core.errors import ConfigError, TaskqError
from taskq_core.terminal_text import terminal_safe
from taskq_core.worker.health import (
    default_socket_path,
    discover_sockets,
    pid_alive,
    probe,
    probe_port,
)
from taskq_core.worker.health import runtime_dir as socket_dir

app = typer.Typer(
    help="Probe a worker's health server (exit 0 healthy, 1 not).", no_args_is_help=True
)

SocketOption = Annotated[
    str | None,
    typer.Option(
        "--socket",
        help="Health socket path (default TASKQ_HEALTH_SOCKET_PATH, else the one worker found).",
    ),
]
PidOption = Annotated[
    int | None,
    typer.Option("--pid", help="Probe the worker with this pid (its socket in the runtime dir)."),
]
PortOption = Annotated[
    int | None,
    typer.Option(
        "--port", min=1, max=65535, help="Ask the TCP health port (TASKQ_HEALTH_PORT) instead."
    ),
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for an answer.")]
# Addresses a server binds to mean "every interface"; a probe connects to loopback instead.
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def _socket_of(pid: int) -> Path:
    """Where worker ``pid`` serves its health socket: the TASKQ_HEALTH_SOCKET_PATH it was
    started with (a workgroup child's, set by its supervisor), else the default path."""
    import psutil

    try:
        given = psutil.Process(pid).environ().get("TASKQ_HEALTH_SOCKET_PATH")
    except (psutil.Error, OSError):  # gone, or another user's: the default is all we know
        given = None
    return Path(given) if given else default_socket_path(pid)


def resolve_socket(socket: str | None, pid: int | None, configured: str | None) -> str:
    """The socket to probe: the flags, then TASKQ_HEALTH_SOCKET_PATH, then discovery."""
    if socket is not None and pid is not None:
        raise ConfigError("pass --socket or --pid, not both")
    if socket is not None:
        return socket
    if pid is not None:
        if not pid_alive(pid):
            raise TaskqError(f"no process with pid {pid} is running")
        path = _socket_of(pid)
        if not path.exists():
            raise TaskqError(f"no health socket for pid {pid} at {path}; pass --socket PATH")
        return str(path)
    if configured:
        return configured
    directory = socket_dir()
    found = discover_sockets(directory)
    if not found:
        raise TaskqError(
            f"no worker health socket in {directory} (is a worker running? "
            "workgroup children have theirs in the directory `taskq workgroup check` prints: "
            "pass --socket PATH)"
        )
    if len(found) > 1:
        pids = ", ".join(str(p) for p in found)
        raise TaskqError(
            f"{len(found)} workers serve health sockets in {directory} (pids {pids}); "
            "pass --socket PATH or --pid PID"
        )
    return str(next(iter(found.values())))


def _probe(ctx: typer.Context, endpoint: str, socket: str | None, pid: int | None,
           port: int | None, timeout: float, dsn: str | None,
           schema: str | None) -> None:  # fmt: skip
    if port is not None:
        if socket is not None or pid is not None:
            raise ConfigError("pass --port, or --socket/--pid, not both")
        host = load_settings(ctx, dsn, schema).health_host
        host = "127.0.0.1" if host in _WILDCARDS else host
        where = f"{host}:{port}"
        ask = probe_port(host, port, endpoint, timeout=timeout)
    else:
        configured = None
        if socket is None and pid is None:
            configured = load_settings(ctx, dsn, schema).health_socket_path
        where = resolve_socket(socket, pid, configured)
        ask = probe(where, endpoint, timeout=timeout)
    try:
        status, body = asyncio.run(ask)
    except TimeoutError:  # before OSError, of which it is a subclass
        raise TaskqError(f"the worker at {where} did not answer within {timeout:g}s") from None
    except FileNotFoundError:
        raise TaskqError(f"no health socket at {where} (is the worker running?)") from None
    except ConnectionRefusedError:
        raise TaskqError(f"nothing listens on {where} (is the worker running?)") from None
    except OSError as exc:
        raise TaskqError(f"cannot reach the health server at {where}: {exc}") from None
    if sys.stdout.isatty():
        # The body as served is for scripts; a terminal gets control characters shown, not
        # sent (a queue name in a metric's labels is an application's text).
        body = terminal_safe(body)
    sys.stdout.write(body + ("" if body.endswith("\n") else "\n"))
    raise typer.Exit(0 if status == 200 else 1)


@app.command("live")
def live(ctx: typer.Context, socket: SocketOption = None, pid: PidOption = None,
         port: PortOption = None, timeout: TimeoutOption = 1.0, dsn: DsnOption = None,
         schema: SchemaOption = None) -> None:  # fmt: skip
    """Is the worker's event loop responsive?"""
    _probe(ctx, "/live", socket, pid, port, timeout, dsn, schema)


@app.command("ready")
def ready(ctx: typer.Context, socket: SocketOption = None, pid: PidOption = None,
          port: PortOption = None, timeout: TimeoutOption = 2.0, dsn: DsnOption = None,
          schema: SchemaOption = None) -> None:  # fmt: skip
    """Is the worker running normally, with its database available?"""
    _probe(ctx, "/ready", socket, pid, port, timeout, dsn, schema)


@app.command("metrics")
def metrics(ctx: typer.Context, socket: SocketOption = None, pid: PidOption = None,
            port: PortOption = None, timeout: TimeoutOption = 2.0, dsn: DsnOption = None,
            schema: SchemaOption = None) -> None:  # fmt: skip
    """Print the worker's metrics in Prometheus text."""
    _probe(ctx, "/metrics", socket, pid, port, timeout, dsn, schema)
