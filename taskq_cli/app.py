"""The root ``taskq`` command: global options, sub-command groups, and the one error path.

Every failure a user can cause leaves as one ``error: ...`` line on stderr with exit 1 (usage
errors too; exit 2 is reserved for the watchdog). ``--debug`` adds the traceback.
"""

from __future__ import annotations

import sys
import traceback
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Protocol, runtime_checkable

import typer

from taskq_cli import output
from taskq_cli.commands import (
    actor_config,
    control,
    embedded,
    enqueue,
    health,
    jobs,
    migrate,
    prune,
    queues,
    top,
    worker,
    workers,
    workgroup,
)
from taskq_cli.options import GlobalOptions
from taskq_core.constants import EXIT_ERROR
from taskq_core.errors import TaskqError
from taskq_core.obs.logs import configure_logging

app = typer.Typer(
    name="taskq",
    help="TaskQ: a durable, Postgres-backed job queue. Operate it from here.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=None,
)
app.add_typer(migrate.app, name="migrate")
app.add_typer(embedded.app, name="embedded")
app.add_typer(health.app, name="health")
app.command("worker")(worker.worker)
app.command("enqueue")(enqueue.enqueue)
app.add_typer(jobs.app, name="jobs")
app.command("cancel")(control.cancel)
app.command("retry")(control.retry)
app.add_typer(queues.app, name="queues")
app.add_typer(actor_config.app, name="actor-config")
app.add_typer(workers.app, name="workers")
app.command("prune")(prune.prune)
app.command("top")(top.top)
app.add_typer(workgroup.app, name="workgroup")


@runtime_checkable
class _CommandContext(Protocol):
    """What typer's usage errors carry as ``ctx``: the command line so far and its help.

    typer (>= 0.26) vendors click privately, so the context's class is not public API; this
    names the two members the error path reads.
    """

    @property
    def command_path(self) -> str:
        """``taskq jobs list``: the command the error belongs to."""
        ...

    def get_help(self) -> str:
        """That command's help text."""
        ...


def _usage_context(exc: typer.TyperException) -> _CommandContext | None:
    """The command a usage error belongs to, or None for errors without one."""
    context = getattr(exc, "ctx", None)
    return context if isinstance(context, _CommandContext) else None


def _version() -> str:
    try:
        return version("taskq")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        output.info(f"taskq {_version()}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    dsn: Annotated[
        str | None, typer.Option("--dsn", help="PostgreSQL DSN, 'embedded' or 'embedded:PATH'.")
    ] = None,
    schema: Annotated[str | None, typer.Option("--schema", help="TaskQ schema name.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """TaskQ: a durable, Postgres-backed job queue. Operate it from here."""
    ctx.obj = GlobalOptions(dsn=dsn, schema=schema, debug=debug)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code (the testable core of ``main``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    configure_logging(fmt="console", level="DEBUG" if debug else "WARNING")
    command = typer.main.get_command(app)
    try:
        result = command.main(args, prog_name="taskq", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        output.error("aborted")
        return EXIT_ERROR
    except typer.TyperException as exc:
        context = _usage_context(exc)
        message = exc.format_message()
        # `taskq` or a group without a sub-command (no_args_is_help): typer raises the
        # help text itself as the error; asking for help is not a failure.
        if context is not None and message == context.get_help():
            output.info(message)
            return 0
        if debug:
            traceback.print_exc()
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        output.error(message + hint)
        return EXIT_ERROR
    except TaskqError as exc:
        if debug:
            traceback.print_exc()
        output.error(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        output.error("interrupted")
        return EXIT_ERROR
    except Exception as exc:
        if debug:
            traceback.print_exc()
            output.error(f"unexpected {type(exc).__name__}: {exc}")
        else:
            output.error(
                f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)"
            )
        return EXIT_ERROR
    return result if isinstance(result, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())
