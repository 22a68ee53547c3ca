"""``taskq worker``: run a worker process until stopped (or until idle).

A worker is a service: an unexpected error (an actors module that raises on import, a crash
at start) is logged as one ``worker_crashed`` event carrying its traceback, in the configured
log format, before the process exits 1. Errors a user can fix stay one line on stderr.

OpenTelemetry is set up from the OTEL_* variables once the actors module is imported (a
provider it installs is kept), and flushed on the way out (``taskq_core.obs.telemetry``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from taskq_cli.options import DsnOption, SchemaOption, load_settings
from taskq_core.actors import load_registry
from taskq_core.constants import EXIT_ERROR
from taskq_core.durations import parse_duration
from taskq_core.errors import ConfigError, SchemaNotMigratedError, TaskqError
from taskq_core.obs.logs import configure_logging, get_logger, log_crash
from taskq_core.obs.telemetry import setup_telemetry
from taskq_core.worker.runtime import run_worker


def _seconds(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value).total_seconds()
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
def worker(
    ctx: typer.Context,
    actors: Annotated[
        str, typer.Option("--actors", help="MODULE:ATTR of a list, tuple or mapping of actors.")
    ],
    queues: Annotated[
        list[str] | None,
        typer.Option("--queues", help="Queue to consume (repeat the flag; default TASKQ_QUEUES)."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Jobs run at once.")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit once the queues stay empty (0/3/4).")
    ] = False,
    idle_max_runtime: Annotated[
        str | None,
        typer.Option("--idle-max-runtime", help="With --until-idle: give up after this (exit 4)."),
    ] = None,
    force_update_actor_config: Annotated[
        bool,
        typer.Option(
            "--force-update-actor-config", help="Overwrite drifted queue/metadata in actor_config."
        ),
    ] = False,
    label: Annotated[
        str | None, typer.Option("--label", help="Label stored on the worker row.")
    ] = None,
    poll_interval: Annotated[
        str | None, typer.Option("--poll-interval", help="Fallback poll cadence (e.g. 1s).")
    ] = None,
    health_socket: Annotated[
        str | None, typer.Option("--health-socket", help="Unix socket of the health server.")
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Run a worker: claim jobs from the queues and execute them with the given actors."""
    settings = load_settings(
        ctx,
        dsn,
        schema,
        queues=queues or None,
        max_concurrency=concurrency,
        idle_max_runtime=_seconds(idle_max_runtime, "--idle-max-runtime"),
        force_update_actor_config=force_update_actor_config or None,
        worker_label=label,
        poll_interval=_seconds(poll_interval, "--poll-interval"),
        health_socket_path=health_socket,
    )
    if settings.health_port is not None and not settings.health_enabled:
        raise ConfigError(
            "TASKQ_HEALTH_PORT is set but TASKQ_HEALTH_ENABLED is false: the port serves the "
            "health server; enable it or unset the port"
        )
    # Before the actors are imported: their module's own errors belong in the service's log.
    configure_logging(fmt=settings.log_format, level=settings.log_level)
    try:
        registry = load_registry(actors)
        telemetry = setup_telemetry(settings, role="worker")
        try:
            code = run_worker(settings, registry, until_idle=until_idle)
        finally:
            telemetry.shutdown()
    except SchemaNotMigratedError as exc:
        # Said as every other command says it: which schema, on which server.
        from taskq_core.backend.factory import describe_dsn

        raise SchemaNotMigratedError(
            f"schema {settings.schema_name!r} on {describe_dsn(settings.direct_dsn)} is not "
            "migrated; run 'taskq migrate up'"
        ) from exc
    except TaskqError:
        raise
    except Exception as exc:
        log_crash(get_logger("worker"), "worker_crashed", exc, actors=actors, exit_code=EXIT_ERROR)
        raise typer.Exit(EXIT_ERROR) from None
    raise typer.Exit(code)
