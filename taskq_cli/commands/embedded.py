"""``taskq embedded status|stop``: the server behind ``TASKQ_PG_DSN=embedded``."""

from __future__ import annotations

from pathlib import Path

import typer

from taskq_cli import output
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings
from taskq_core import embedded
from taskq_core.errors import ConfigError

app = typer.Typer(help="Manage the embedded PostgreSQL server.", no_args_is_help=True)


def _data_dir(ctx: typer.Context, dsn: str | None, schema: str | None) -> Path:
    """The configured embedded data directory; with no DSN configured at all, the default one."""
    settings = load_settings(ctx, dsn, schema)
    target = settings.pg_dsn if "pg_dsn" in settings.model_fields_set else "embedded"
    if not embedded.is_embedded_dsn(target):
        raise ConfigError("the configured DSN is not embedded (use 'embedded' or 'embedded:PATH')")
    return embedded.data_dir_for(target)


@app.command("status")
def status(
    ctx: typer.Context, dsn: DsnOption = None, schema: SchemaOption = None, json: JsonOption = False
) -> None:
    """Show whether the embedded server runs, its pid, data directory and URI."""
    current = embedded.status(_data_dir(ctx, dsn, schema))
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
    """Stop the embedded server (it starts again on next use)."""
    data_dir = _data_dir(ctx, dsn, schema)
    if embedded.stop(data_dir):
        output.info(f"stopped the embedded PostgreSQL in {data_dir}")
    else:
        output.info(f"the embedded PostgreSQL in {data_dir} is not running")
