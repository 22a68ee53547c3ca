"""``taskq workgroup``: supervise worker children described by a TOML file, and control them.

``check`` validates the file and prints the plan, ``init`` writes a commented starter file,
``start`` runs the group: a live table of children on a terminal, one structured log line per
lifecycle event otherwise. ``status``, ``stop``, ``reload`` and ``restart`` talk to a running
``start`` of the same file through the control socket in its runtime directory. The
supervision itself lives in ``taskq_core.supervisor``.

Telemetry: the children inherit the OTEL_* variables with the rest of the environment and set
up their own exporters (service.name ``taskq-worker`` unless OTEL_SERVICE_NAME says
otherwise); the supervisor sets up the same way as ``taskq-workgroup``, which exports only
what it records itself. TASKQ_HEALTH_PORT is per process: two children that would bind the
same port are refused by ``check`` and ``start``.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live

from taskq_cli import output
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings, run_async
from taskq_cli.workgroup_views import children_table, duration, plan_document, print_plan
from taskq_core.constants import EXIT_ERROR
from taskq_core.durations import parse_duration
from taskq_core.errors import ConfigError, TaskqError
from taskq_core.ids import uuid7
from taskq_core.obs.logs import configure_logging, get_logger, log_crash
from taskq_core.obs.telemetry import setup_telemetry
from taskq_core.settings import ENV_PREFIX, TaskqSettings
from taskq_core.supervisor.control import is_answering, send_command
from taskq_core.supervisor.manager import PlanReader, WorkgroupManager
from taskq_core.supervisor.plan import (
    WorkgroupPlan,
    build_plan,
    check_actors,
    default_runtime_dir,
    runtime_dir_of,
)
from taskq_core.supervisor.runtime import open_workgroup
from taskq_core.supervisor.schema import load_workgroup, starter_toml

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(help="Supervise worker processes described by a TOML file.", no_args_is_help=True)

FileArgument = Annotated[
    Path, typer.Argument(help="Workgroup TOML file.", dir_okay=False, show_default=False)
]


def _print(text: str = "") -> None:
    output.info(text)


@app.command("check")
def check(
    file: FileArgument,
    no_import: Annotated[
        bool, typer.Option("--no-import", help="Do not import the actors modules.")
    ] = False,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Validate FILE and print the plan: every child's command line and settings (exit 0/1)."""
    config = load_workgroup(file)
    plan = build_plan(config)
    check_health_ports(plan, TaskqSettings.load().health_port)
    actors = None
    if not no_import:
        report = check_actors(config)
        actors = dict(report.actors)
        for warning in report.warnings:
            output.warn(warning)
    if json:
        output.print_json(plan_document(plan, actors))
    else:
        print_plan(plan, actors)


def check_health_ports(plan: WorkgroupPlan, inherited: int | None) -> None:
    """Refuse children that would bind one TASKQ_HEALTH_PORT: all but the first would exit 1
    at every start. ``inherited``: the port the supervisor's own environment sets."""
    variable = ENV_PREFIX + "HEALTH_PORT"
    by_port: dict[int, list[str]] = {}
    for child in plan.children:
        raw = next((v for k, v in child.env.items() if k.upper() == variable), None)
        port = int(raw) if raw is not None and raw.strip() else inherited
        if port is not None:
            by_port.setdefault(port, []).append(child.label)
    for port, labels in by_port.items():
        if len(labels) > 1:
            raise ConfigError(
                f"{plan.file}: {variable} {port} would be bound by {len(labels)} children "
                f"({', '.join(labels)}); set it in the env of specs with processes = 1, one "
                "port each, or leave it unset (the Unix sockets serve the same endpoints)"
            )


# --- init ---------------------------------------------------------------------------------


@app.command("init")
def init(
    file: Annotated[
        Path, typer.Argument(help="Where to write the starter file.", dir_okay=False)
    ] = Path("workgroup.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Write a commented starter workgroup file (refuses to overwrite without --force)."""
    if file.exists() and not force:
        raise ConfigError(f"{file} already exists; pass --force to overwrite it")
    try:
        file.write_text(starter_toml(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {file}: {exc.strerror or exc}") from None
    output.info(
        f"wrote {file}: set `actors` and the [[workers]] tables, "
        f"then run `taskq workgroup check {file}`"
    )


# --- start --------------------------------------------------------------------------------


async def _run_live(manager: WorkgroupManager, output_dir: Path | None) -> int:
    with Live(
        children_table(manager, output_dir=output_dir),
        console=output.stdout,
        refresh_per_second=4,
        redirect_stderr=True,
    ) as live:
        task = asyncio.create_task(manager.run(), name="workgroup")
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            live.update(children_table(manager, output_dir=output_dir))
        return task.result()


def child_environment(settings: TaskqSettings) -> dict[str, str]:
    """The environment children start from: this one, with the database the supervisor was
    given (a ``--dsn`` for another database drops the environment's split DSNs, as
    TaskqSettings.load does) and its schema."""
    env = {
        **os.environ,
        "TASKQ_PG_DSN": settings.pg_dsn,
        "TASKQ_SCHEMA_NAME": settings.schema_name,
    }
    for variable, value in (
        ("TASKQ_PG_DSN_DIRECT", settings.pg_dsn_direct),
        ("TASKQ_PG_DSN_POOLED", settings.pg_dsn_pooled),
    ):
        if value is None:
            env.pop(variable, None)
        else:
            env[variable] = value
    return env


async def _start(
    plan: WorkgroupPlan,
    *,
    settings: TaskqSettings,
    output_dir: Path | None,
    live: bool,
    read_plan: PlanReader,
) -> int:
    async with open_workgroup(
        plan,
        # The supervisor's health checks are short reads: the pooled DSN serves them.
        pg_dsn=settings.pooled_dsn,
        schema=settings.schema_name,
        base_env=child_environment(settings),
        output_dir=output_dir,
        read_plan=read_plan,
    ) as manager:
        if live:
            return await _run_live(manager, output_dir)
        return await manager.run()


@app.command("start")
def start(
    ctx: typer.Context,
    file: FileArgument,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Run children with --until-idle; exit once all have (0 ok, 3 failures, ...).",
        ),
    ] = False,
    idle_max_runtime: Annotated[
        str | None,
        typer.Option("--idle-max-runtime", help="With --until-idle: passed to every child."),
    ] = None,
    log_dir: Annotated[
        Path | None,
        typer.Option(
            "--log-dir", help="Append each child's output to DIR/LABEL.log.", file_okay=False
        ),
    ] = None,
    plain: Annotated[
        bool, typer.Option("--plain", help="Log lines even on a terminal (no live table).")
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Run one `taskq worker` child per process in FILE and keep them up until stopped."""
    settings = load_settings(ctx, dsn, schema)
    max_runtime = None
    if idle_max_runtime is not None:
        if not until_idle:
            raise ConfigError("--idle-max-runtime needs --until-idle")
        try:
            max_runtime = parse_duration(idle_max_runtime).total_seconds()
        except ValueError as exc:
            raise ConfigError(f"--idle-max-runtime: {exc}") from None
    config = load_workgroup(file)
    plan = build_plan(
        config, instance=str(uuid7()), until_idle=until_idle, idle_max_runtime=max_runtime
    )
    check_health_ports(plan, settings.health_port)
    live = not plain and output.stdout.is_terminal
    # On a terminal the children's output would tear through the table: it goes to files.
    output_dir = log_dir or (plan.runtime_dir if live else None)
    configure_logging(fmt="console" if live else settings.log_format, level=settings.log_level)

    def read_plan() -> WorkgroupPlan:
        # A reload keeps the instance and the start's flags: only the file's content changes.
        reloaded = build_plan(
            load_workgroup(file),
            instance=plan.instance,
            until_idle=until_idle,
            idle_max_runtime=max_runtime,
        )
        check_health_ports(reloaded, settings.health_port)
        return reloaded

    try:
        telemetry = setup_telemetry(settings, role="workgroup")
        try:
            code = run_async(
                _start(
                    plan,
                    settings=settings,
                    output_dir=output_dir,
                    live=live,
                    read_plan=read_plan,
                )
            )
        finally:
            telemetry.shutdown()
    except TaskqError:
        raise
    except Exception as exc:
        # The supervisor is a service: its log gets the traceback, in one event.
        log_crash(get_logger("workgroup"), "workgroup_crashed", exc, file=str(file))
        raise typer.Exit(EXIT_ERROR) from None
    raise typer.Exit(code)


# --- status, stop, reload, restart: a running group, through its control socket -----------


def _runtime_dir(file: Path) -> Path:
    """The runtime directory of the supervisor running ``file``: the default one, derived from
    the file's path alone, when a supervisor answers there (so a file midway through an edit
    does not stop ``status``, ``stop`` or ``reload``); else the file's ``runtime_dir``, which
    needs the file read (not planned)."""
    default = default_runtime_dir(file)
    if is_answering(default):
        return default
    return runtime_dir_of(load_workgroup(file))


@app.command("status")
def status(
    file: FileArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Show the children of the running `workgroup start FILE`: state, pid, uptime, restarts."""
    answer = send_command(_runtime_dir(file), "status")
    answer.pop("ok", None)
    if json:
        output.print_json(answer)
        return
    state = "stopping" if answer["stopping"] else "running"
    _print(
        f"workgroup {answer['file']} · {state} · supervisor pid {answer['pid']} · "
        f"instance {answer['instance']}"
    )
    output.print_table(
        [
            output.Column("child", "id"),
            output.Column("spec"),
            output.Column("state"),
            output.Column("pid", "number"),
            output.Column("uptime", drop=2),
            output.Column("restarts", "number", drop=1),
            output.Column("exit", "number", drop=3),
        ],
        [
            [
                child["label"],
                child["spec"],
                child["state"]
                + (f" ({child['restart_in']:.1f}s)" if child["restart_in"] is not None else ""),
                child["pid"],
                duration(child["uptime"]) if child["uptime"] is not None else None,
                child["restarts"],
                child["last_exit_code"],
            ]
            for child in answer["children"]
        ],
    )


@app.command("stop")
def stop(
    file: FileArgument,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Return once the stop is asked, not once done.")
    ] = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Stop the running `workgroup start FILE` as SIGTERM would, and wait until it has exited."""
    runtime_dir = _runtime_dir(file)
    answer = send_command(runtime_dir, "stop")
    stopping = list(answer["asked_to_stop"])
    stopped = False
    if not no_wait:
        # The supervisor answers until every child has exited (SIGKILL after its
        # shutdown_timeout), then closes the socket: wait a little past that.
        deadline = time.monotonic() + float(answer["shutdown_timeout"]) + 10.0
        while is_answering(runtime_dir):
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"workgroup {file} (supervisor pid {answer['pid']}) is still stopping "
                    f"after {duration(float(answer['shutdown_timeout']) + 10.0)}"
                )
            time.sleep(0.1)
        stopped = True
    if json:
        output.print_json({"pid": answer["pid"], "children": stopping, "stopped": stopped})
    else:
        children = f"{len(stopping)} {'child' if len(stopping) == 1 else 'children'}"
        state = "stopped" if stopped else "is stopping"
        output.info(f"workgroup {file} {state} ({children})")


@app.command("reload")
def reload(
    file: FileArgument,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Make the running `workgroup start FILE` read FILE again and apply it (as SIGHUP does).

    Changed children are restarted, new ones started, removed ones stopped; the others
    re-read their settings. A file that does not validate changes nothing.
    """
    answer = send_command(_runtime_dir(file), "reload")
    answer.pop("ok", None)
    if json:
        output.print_json(answer)
        return
    parts = [
        f"{verb} {', '.join(answer[key])}"
        for key, verb in (
            ("started", "started"),
            ("restarted", "restarted"),
            ("stopped", "stopping"),
            ("unchanged", "unchanged"),
        )
        if answer[key]
    ]
    output.info(f"workgroup {file} reloaded: {'; '.join(parts)}")


@app.command("restart")
def restart(
    file: FileArgument,
    child: Annotated[
        str, typer.Argument(help="A child label (api-1) or a spec name (every child of it).")
    ],
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Restart one child of the running `workgroup start FILE` gracefully (SIGTERM, new pid)."""
    answer = send_command(_runtime_dir(file), "restart", child=child)
    if json:
        output.print_json({"restarted": answer["restarted"]})
        return
    output.info(f"restarting {', '.join(answer['restarted'])}")
