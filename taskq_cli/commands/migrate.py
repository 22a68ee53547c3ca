"""``taskq migrate up|status``: apply and inspect the forward-only schema migrations.

``status --check`` is the gate for CI and deploy scripts: it exits 1 while any migration is
pending (or an applied file drifted), after printing the same listing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from taskq_cli import output
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings, run_async
from taskq_core import embedded
from taskq_core.backend.factory import apply_migrations, read_migration_status
from taskq_core.errors import MigrationError

if TYPE_CHECKING:
    from taskq_core.backend.factory import MigrateResult, MigrationState

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(help="Apply and inspect schema migrations.", no_args_is_help=True)


async def _up(dsn: str, schema: str) -> MigrateResult:
    # One of the two commands that may create the embedded database (`embedded start` is
    # the other): migrating a fresh clone is how a project starts.
    with embedded.using(embedded.EmbeddedUse.CREATE):
        return await apply_migrations(dsn, schema)


async def _status(dsn: str, schema: str) -> list[MigrationState]:
    # Read-only: never creates or starts the embedded database.
    with embedded.using(embedded.EmbeddedUse.RUNNING):
        return await read_migration_status(dsn, schema)


def _warn_drift(names: list[str]) -> None:
    for name in names:
        output.warn(f"migration {name} changed after it was applied (checksum drift)")


@app.command("up")
def up(
    ctx: typer.Context,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Apply every pending migration (safe to run concurrently: an advisory lock serializes it)."""
    settings = load_settings(ctx, dsn, schema)
    result = run_async(_up(settings.direct_dsn, settings.schema_name))
    _warn_drift(result.drift)
    if json:
        output.print_json(
            {"schema": settings.schema_name, "applied": result.applied, "drift": result.drift}
        )
        return
    if result.applied:
        output.info(
            f"applied {len(result.applied)} migration(s) to schema {settings.schema_name}: "
            + ", ".join(result.applied)
        )
    else:
        output.info(f"schema {settings.schema_name} is up to date")


@app.command("status")
def status(
    ctx: typer.Context,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    json: JsonOption = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Exit 1 when a migration is pending or drifted (for CI and deploys)."
        ),
    ] = False,
) -> None:
    """List applied and pending migrations; warn when an applied file has changed."""
    settings = load_settings(ctx, dsn, schema)
    states = run_async(_status(settings.direct_dsn, settings.schema_name))
    _warn_drift([f"{s.version}_{s.name}" for s in states if s.status == "drift"])
    _print_status(settings.schema_name, states, json)
    if check:
        _check(settings.schema_name, states)


def _check(schema: str, states: list[MigrationState]) -> None:
    """Fail (exit 1, one line) unless every migration is applied unchanged."""
    pending = [f"{s.version}_{s.name}" for s in states if s.status == "pending"]
    drifted = [f"{s.version}_{s.name}" for s in states if s.status == "drift"]
    problems = []
    if pending:
        problems.append(f"{len(pending)} pending ({', '.join(pending)}; run 'taskq migrate up')")
    if drifted:
        problems.append(f"{len(drifted)} changed after being applied ({', '.join(drifted)})")
    if problems:
        raise MigrationError(f"schema {schema} is not current: " + "; ".join(problems))


def _print_status(schema: str, states: list[MigrationState], json: bool) -> None:
    if json:
        output.print_json(
            {
                "schema": schema,
                "migrations": [
                    {
                        "version": s.version,
                        "name": s.name,
                        "status": s.status,
                        "applied_at": s.applied_at,
                    }
                    for s in states
                ],
                "pending": sum(1 for s in states if s.status == "pending"),
            }
        )
        return
    output.print_table(
        ["version", "name", "status", "applied at"],
        [
            (
                s.version,
                s.name,
                s.status,
                s.applied_at and s.applied_at.isoformat(timespec="seconds"),
            )
            for s in states
        ],
        title=f"schema {schema}",
    )
