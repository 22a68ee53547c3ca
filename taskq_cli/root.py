"""The root ``taskq`` command: global options, the sub-command table, and the one error path.

Every failure a user can cause leaves as one ``error: ...`` line on stderr with exit 1 (usage
errors too; exit 2 is reserved for the watchdog). ``--debug`` adds the traceback.

Sub-commands are listed in ``COMMANDS`` and imported only when used (see ``lazy``); a new
command goes in that table with the first sentence of its help as the summary
(tests/cli/test_startup_lazy.py holds the two together).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Protocol, runtime_checkable

import typer

from taskq_cli import completion
from taskq_cli.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED
from taskq_cli.lazy import LazyCommand, LazyGroup, build_under
from taskq_cli.options import GlobalOptions

COMMANDS: tuple[LazyCommand, ...] = (
    LazyCommand(
        "worker",
        "taskq_cli.commands.worker:worker",
        "Run a worker: claim jobs from the queues and execute them with the given actors.",
    ),
    LazyCommand(
        "enqueue",
        "taskq_cli.commands.enqueue:enqueue",
        "Enqueue jobs for ACTOR and print their ids, one per line (--json: the jobs created).",
    ),
    LazyCommand(
        "cancel",
        "taskq_cli.commands.cancel_retry:cancel",
        "Cancel a job (at once when waiting, cooperatively when running), or all that match.",
    ),
    LazyCommand(
        "retry",
        "taskq_cli.commands.cancel_retry:retry",
        "Re-pend a failed, crashed or cancelled job with a fresh attempt budget, or all that "
        "match.",
    ),
    LazyCommand(
        "prune",
        "taskq_cli.commands.prune:prune",
        "Move old terminal jobs to the archive now (as the leader's prune does), or count them "
        "with --dry-run.",
    ),
    LazyCommand(
        "top",
        "taskq_cli.commands.top:top",
        "Live dashboard: queues, workers and recent failures; cancel, retry, pause from it.",
    ),
    LazyCommand(
        "config",
        "taskq_cli.commands.config:config",
        "Print every effective setting and its source, secrets masked.",
    ),
    LazyCommand(
        "migrate", "taskq_cli.commands.migrate:app", "Apply and inspect schema migrations."
    ),
    LazyCommand(
        "embedded",
        "taskq_cli.commands.embedded:app",
        "Manage the embedded PostgreSQL server (TASKQ_PG_DSN=embedded: the nearest "
        ".taskq/pgdata up from here; embedded:PATH: PATH).",
    ),
    LazyCommand(
        "health",
        "taskq_cli.commands.health:app",
        "Probe a worker's health server (exit 0 healthy, 1 not).",
    ),
    LazyCommand(
        "jobs",
        "taskq_cli.commands.jobs:app",
        "Inspect jobs: list, show one, explain why one is not running.",
    ),
    LazyCommand(
        "queues",
        "taskq_cli.commands.queues:app",
        "List queues and change how dispatch serves them.",
    ),
    LazyCommand(
        "actor-config",
        "taskq_cli.commands.actor_config:app",
        "Operator-owned actor capacity: max_concurrent, max_pending, result_ttl.",
    ),
    LazyCommand(
        "schedules",
        "taskq_cli.commands.schedules:app",
        "Cron schedules: list them, show their next fire times, add, enable, disable, delete, "
        "or run one now.",
    ),
    LazyCommand(
        "batches",
        "taskq_cli.commands.batches:app",
        "Batches with a failure policy or a finalizer: list them, show one's progress.",
    ),
    LazyCommand(
        "workflows",
        "taskq_cli.commands.workflows:app",
        "Workflows (jobs that wait for other jobs): list them, show one's steps, cancel or "
        "retry one.",
    ),
    LazyCommand("workers", "taskq_cli.commands.workers:app", "Registered workers."),
    LazyCommand(
        "metrics",
        "taskq_cli.commands.metrics:app",
        "Fleet metrics for Prometheus: queue depth, backlog age, throughput, failures.",
    ),
    LazyCommand("ui", "taskq_cli.commands.ui:app", "The admin web UI."),
    LazyCommand(
        "workgroup",
        "taskq_cli.commands.workgroup:app",
        "Supervise worker processes described by a TOML file.",
    ),
)

ROOT_SETTINGS: dict[str, Any] = {
    "no_args_is_help": True,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
}


class RootGroup(LazyGroup):
    """``taskq``: the table above, each entry built as the eager registration would."""

    entries = COMMANDS
    finishers = (completion.attach,)

    @classmethod
    def build(cls, entry: LazyCommand) -> Any:
        return build_under(ROOT_SETTINGS, entry)


app = typer.Typer(
    name="taskq",
    help="TaskQ: a durable, Postgres-backed job queue. Operate it from here.",
    cls=RootGroup,
    add_completion=True,
    # Children inherit help_option_names from the root's context: -h everywhere.
    context_settings={"help_option_names": ["-h", "--help"]},
    **ROOT_SETTINGS,
)


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
    # Imported here: the package metadata machinery is a noticeable share of start-up.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("taskq")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"taskq {_version()}")
        raise typer.Exit()


# Option declarations here mirror the commands' on purpose: typer reads the root options
# from this signature alone.
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
    # Here rather than at start-up: help, --version and completion never log.
    from taskq_core.obs.logs import configure_logging

    configure_logging(fmt="console", level="DEBUG" if debug else "WARNING")
    ctx.obj = GlobalOptions(dsn=dsn, schema=schema, debug=debug)


def _error(message: str) -> None:
    # taskq_cli.output.error's format; that module loads rich and the library. The message
    # may quote database text or an argument: control characters are shown, not sent.
    from taskq_core.terminal_text import terminal_safe

    line = " ".join(terminal_safe(message).split())
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()


def _print_traceback() -> None:
    import traceback

    from taskq_core.terminal_text import terminal_safe

    # The exception's message may quote database text or an argument, as the error line does.
    sys.stderr.write(terminal_safe(traceback.format_exc()))
    sys.stderr.flush()


def invoke(args: list[str]) -> int:
    """Run ``taskq ARGS`` and map every failure to the exit-code contract."""
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        result = command.main(args, prog_name="taskq", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        _error("aborted")
        return EXIT_ERROR
    except typer.TyperException as exc:
        context = _usage_context(exc)
        message = exc.format_message()
        # `taskq` or a group without a sub-command (no_args_is_help): typer raises the
        # help text itself as the error; asking for help is not a failure.
        if context is not None and message == context.get_help():
            typer.echo(message)
            return 0
        if debug:
            _print_traceback()
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        _error(message + hint)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            _print_traceback()
        if _is_taskq_error(exc):
            _error(str(exc))
        elif debug:
            _error(f"unexpected {type(exc).__name__}: {exc}")
        else:
            _error(f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_ERROR
    return result if isinstance(result, int) else 0


def _is_taskq_error(exc: Exception) -> bool:
    # Imported only on this path: whatever raised it has loaded the library already.
    from taskq_core.errors import TaskqError

    return isinstance(exc, TaskqError)
