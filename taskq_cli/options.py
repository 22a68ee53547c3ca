"""Option types shared by every command, and how they merge into TaskqSettings."""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    # Loaded when settings are: the root command imports this module at start-up.
    from taskq_core.settings import TaskqSettings
    from taskq_core.statemachine import JobStatus

T = TypeVar("T")

# Each command lists its own parameters (typer has no option groups, and an option must
# show in its command's help), so commands that take the same options have signatures
# alike line for line: those lines are declarations, and what each option says lives here.

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN, 'embedded' or 'embedded:PATH' (TASKQ_PG_DSN)."),
]
SchemaOption = Annotated[
    str | None, typer.Option("--schema", help="Schema holding TaskQ's tables (TASKQ_SCHEMA_NAME).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
YesOption = Annotated[bool, typer.Option("--yes", help="Confirm a bulk operation.")]

# The job a command acts on, and the filters of the commands that act on many jobs.
JobIdArgument = Annotated[
    str,
    typer.Argument(help="Job id: the UUID or any unique prefix or suffix of it.", metavar="ID"),
]
QueueFilterOption = Annotated[str | None, typer.Option("--queue", help="Jobs of this queue.")]
ActorFilterOption = Annotated[str | None, typer.Option("--actor", help="Jobs of this actor.")]
ActorArgument = Annotated[
    str, typer.Argument(help="Actor name (as registered by the workers).", metavar="ACTOR")
]


def status_option(help: str, statuses: Collection[JobStatus]) -> Any:
    """A repeatable ``--status`` whose shell completion offers ``statuses`` (in JobStatus
    order); each command says in ``help`` which of them it takes."""
    return typer.Option("--status", help=help, autocompletion=_status_names(statuses))


def _status_names(statuses: Collection[JobStatus]) -> Callable[[], list[str]]:
    def names() -> list[str]:
        # Imported at TAB time only, as the command modules are.
        from taskq_core.statemachine import JobStatus

        return [status.value for status in JobStatus if status in statuses]

    return names


@dataclass
class GlobalOptions:
    """Values given on ``taskq`` itself, before the subcommand."""

    dsn: str | None = None
    schema: str | None = None
    debug: bool = False


def global_options(ctx: typer.Context) -> GlobalOptions:
    """The root options, found on the outermost context."""
    root = ctx.find_root()
    if not isinstance(root.obj, GlobalOptions):
        root.obj = GlobalOptions()
    return root.obj


def load_settings(
    ctx: typer.Context, dsn: str | None, schema: str | None, **extra: Any
) -> TaskqSettings:
    """Settings from env/.env, with root flags, then subcommand flags, winning in that order."""
    from taskq_core.settings import TaskqSettings

    root = global_options(ctx)
    return TaskqSettings.load_flagged(
        {"pg_dsn": "--dsn", "schema_name": "--schema"},
        pg_dsn=dsn or root.dsn,
        schema_name=schema or root.schema,
        **extra,
    )


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine to completion."""
    import asyncio

    return asyncio.run(coro)
