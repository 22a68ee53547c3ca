"""How an operator command reaches the database: one Backend per run, always closed.

``with_backend`` loads the settings (flags over environment over ``.env``), opens a small
backend (``backend.factory``'s COMMAND role; READER for a command that only reads, on
TASKQ_PG_DSN_REPLICA when one is set, with a note on stderr of how far behind it is), runs
the command's coroutine on it and maps the database failures an operator can cause (schema
not migrated, connection lost) to one-line TaskqErrors.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import typer

from taskq_cli.options import load_settings, run_async
from taskq_core.backend.protocol import Backend
from taskq_core.errors import DatabaseUnavailableError, SchemaNotMigratedError
from taskq_core.settings import TaskqSettings

T = TypeVar("T")


@asynccontextmanager
async def open_backend(
    settings: TaskqSettings,
    *,
    direct: bool = False,
    max_size: int | None = None,
    read: bool = False,
) -> AsyncIterator[Backend]:
    """A backend on the configured DSN and schema, closed on exit. ``direct``: on
    TASKQ_PG_DSN_DIRECT even when a pooled DSN is set, for a command that holds a session
    advisory lock (a transaction-mode PgBouncer would unlock it on another server session).
    ``max_size``: connections, for a server that answers requests concurrently. ``read``:
    only reads, on TASKQ_PG_DSN_REPLICA when one is set."""
    # Imported here so `--help` and shell completion never load the database stack.
    from taskq_core import embedded
    from taskq_core.backend import factory

    dsn = settings.direct_dsn if direct else settings.pooled_dsn
    role = factory.Role.COMMAND
    if read:
        dsn, role = settings.pg_dsn_replica or dsn, factory.Role.READER
    # An operator command never creates or starts the embedded server: a typo or the wrong
    # directory would otherwise grow a second, empty database, and `embedded stop` would be
    # undone behind the operator's back.
    with embedded.using(embedded.EmbeddedUse.RUNNING):
        backend = await factory.open_backend(settings, role, direct=direct, max_size=max_size)
    # Messages name an embedded server by its data directory.
    is_embedded = embedded.is_embedded_dsn(dsn)
    where = embedded.describe(dsn) if is_embedded else factory.describe_dsn(dsn)
    server = where if is_embedded else f"PostgreSQL at {where}"
    try:
        yield backend
    except SchemaNotMigratedError as exc:
        raise SchemaNotMigratedError(
            f"schema {settings.schema_name!r} on {where} is not migrated; run 'taskq migrate up'"
        ) from exc
    except DatabaseUnavailableError as exc:
        raise DatabaseUnavailableError(f"lost the connection to {server} ({exc})") from exc
    finally:
        await backend.close()


def with_backend(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    action: Callable[[Backend], Awaitable[T]],
    *,
    read: bool = False,
) -> T:
    """Run ``action(backend)`` for one command and return its result. ``read``: the action
    only reads (on the replica when one is set, saying how stale it may be)."""
    settings = load_settings(ctx, dsn, schema)

    async def run() -> T:
        async with open_backend(settings, read=read) as backend:
            result = await action(backend)
            if read:
                await note_staleness(backend, settings)
            return result

    return run_async(run())


async def note_staleness(backend: Backend, settings: TaskqSettings) -> None:
    """When ``backend`` reads the replica: one line on stderr, how far behind its primary it
    was (unknown when the standby does not say: the command's own read stands)."""
    if settings.pg_dsn_replica is None:
        return
    from taskq_cli.replica import StalenessWatch
    from taskq_core.backend.factory import describe_dsn

    watch = StalenessWatch(backend, describe_dsn(settings.pg_dsn_replica))
    await watch.refresh()
    sys.stderr.write(f"note: {watch.note}\n")
