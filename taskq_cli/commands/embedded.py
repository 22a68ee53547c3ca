"""``taskq embedded start|status|stop``: the server behind ``TASKQ_PG_DSN=embedded``.

``embedded`` names the nearest ``.taskq/pgdata`` in the current directory or its parents;
``embedded:PATH`` names PATH. Only ``start`` (and ``taskq migrate up``) create a database;
operator commands refuse a missing or stopped one, so ``stop`` holds until ``start``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from taskq_cli import output
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings
from taskq_core import embedded
from taskq_core.errors import ConfigError

app = typer.Typer(
    help=(
        "Manage the embedded PostgreSQL server (TASKQ_PG_DSN=embedded: the nearest "
        ".taskq/pgdata up from here; embedded:PATH: PATH). Only 'embedded start' and "
        "'migrate up' create one; workers start a stopped one (and log it); other commands "
        "refuse a missing or stopped one."
    ),
    no_args_is_help=True,
)


def _target(ctx: typer.Context, dsn: str | None, schema: str | None) -> tuple[str, Path]:
    """The configured embedded DSN and its data directory; with no DSN configured at all,
    plain ``embedded``."""
    settings = load_settings(ctx, dsn, schema)
    target = settings.pg_dsn if "pg_dsn" in settings.model_fields_set else "embedded"
    if not embedded.is_embedded_dsn(target):
        raise ConfigError("the configured DSN is not embedded (use 'embedded' or 'embedded:PATH')")
    return target, embedded.data_dir_for(target)


@app.command("start")
def start(ctx: typer.Context, dsn: DsnOption = None, schema: SchemaOption = None) -> None:
    """Start the embedded server, creating its data directory when there is none."""
    target, data_dir = _target(ctx, dsn, schema)
    _uri, outcome = embedded.serve(data_dir, embedded.EmbeddedUse.CREATE, target)
    if outcome is embedded.ServerOutcome.RUNNING:
        output.info(f"the embedded PostgreSQL in {data_dir} is already running")
        return
    verb = "created and started" if outcome is embedded.ServerOutcome.CREATED else "started"
    output.info(f"{verb} the embedded PostgreSQL in {data_dir}")
    if outcome is embedded.ServerOutcome.CREATED:
        flag = "" if target == "embedded" else f" --dsn embedded:{data_dir}"
        output.info(f"next: taskq migrate up{flag}")


@app.command("status")
def status(
    ctx: typer.Context, dsn: DsnOption = None, schema: SchemaOption = None, json: JsonOption = False
) -> None:
    """Show whether the embedded server runs, its pid, data directory and URI."""
    current = embedded.status(_target(ctx, dsn, schema)[1])
    if json:
        output.print_json(current)
        return
    state = "running" if current.running else ("stopped" if current.initialized else "not created")
    output.print_table(
        ["data dir", "state", "pid", "uri"],
        [(current.data_dir, state, current.pid, current.uri)],
    )


@app.command("stop")
def stop(ctx: typer.Context, dsn: DsnOption = None, schema: SchemaOption = None) -> None:
    """Stop the embedded server; operator commands refuse it until `taskq embedded start`."""
    target, data_dir = _target(ctx, dsn, schema)
    if not embedded.status(data_dir).initialized:
        raise ConfigError(embedded.missing_message(target, data_dir))
    if embedded.stop(data_dir):
        output.info(f"stopped the embedded PostgreSQL in {data_dir}")
    else:
        output.info(f"the embedded PostgreSQL in {data_dir} is not running")
