"""``taskq health live|ready``: exec probes for a worker's Unix-socket health server."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from taskq_cli.options import DsnOption, SchemaOption, load_settings
from taskq_core.errors import TaskqError
from taskq_core.worker.health import probe

app = typer.Typer(
    help="Probe a worker's health server (exit 0 healthy, 1 not).", no_args_is_help=True
)

SocketOption = Annotated[
    str | None,
    typer.Option("--socket", help="Health socket path (default TASKQ_HEALTH_SOCKET_PATH)."),
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for an answer.")]


def _probe(ctx: typer.Context, endpoint: str, socket: str | None, timeout: float,
           dsn: str | None, schema: str | None) -> None:  # fmt: skip
    path = socket or load_settings(ctx, dsn, schema).health_socket_path
    try:
        status, body = asyncio.run(probe(path, endpoint, timeout=timeout))
    except FileNotFoundError:
        raise TaskqError(f"no health socket at {path} (is the worker running?)") from None
    except (ConnectionError, OSError) as exc:
        raise TaskqError(f"cannot reach the health socket at {path}: {exc}") from None
    except TimeoutError:
        raise TaskqError(f"the worker at {path} did not answer within {timeout:g}s") from None
    sys.stdout.write(body + ("" if body.endswith("\n") else "\n"))
    raise typer.Exit(0 if status == 200 else 1)


@app.command("live")
def live(ctx: typer.Context, socket: SocketOption = None, timeout: TimeoutOption = 1.0,
         dsn: DsnOption = None, schema: SchemaOption = None) -> None:  # fmt: skip
    """Is the worker's event loop responsive?"""
    _probe(ctx, "/live", socket, timeout, dsn, schema)


@app.command("ready")
def ready(ctx: typer.Context, socket: SocketOption = None, timeout: TimeoutOption = 2.0,
          dsn: DsnOption = None, schema: SchemaOption = None) -> None:  # fmt: skip
    """Is the worker running normally, with its database reachable?"""
    _probe(ctx, "/ready", socket, timeout, dsn, schema)
