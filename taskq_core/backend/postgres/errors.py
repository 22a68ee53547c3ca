"""asyncpg's exceptions turned into TaskQ's own, at the seam: the one list of transient shapes.

Nothing above the backend imports asyncpg. Every public coroutine of PostgresBackend runs
through ``translated`` (applied to the class by ``translate_errors``), so a caller sees:

- DatabaseUnavailableError: the database is away (refused, restarting, shutting down, the
  connection dropped, in every shape asyncpg reports that on a pooled connection, or a
  statement did not answer within its timeout); retry later;
- TransientDatabaseError: the statement lost a race (deadlock, serialization failure) or hit a
  server-side statement timeout; retry;
- SchemaNotMigratedError: the schema or its tables do not exist;
- anything else unchanged (a bug, a constraint the caller must handle, bad input).

Authentication failures are deliberately not transient: retrying a wrong password hides it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import asyncpg

from taskq_core.errors import (
    DatabaseUnavailableError,
    SchemaNotMigratedError,
    TaskqError,
    TransientDatabaseError,
)

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)

# The database is away: nothing this session sends can succeed until it is back.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable (ConnectionError is one)
    TimeoutError,  # no answer within the command or connect timeout
    asyncpg.PostgresConnectionError,  # 08xxx, and "connection was closed mid-operation"
    asyncpg.AdminShutdownError,  # 57P01: fast or smart shutdown, a restart
    asyncpg.CrashShutdownError,  # 57P02: another backend crashed, the server resets
    asyncpg.CannotConnectNowError,  # 57P03: starting up or in recovery
    asyncpg.TooManyConnectionsError,  # 53300: saturated; it frees up
    asyncpg.IdleSessionTimeoutError,
    asyncpg.IdleInTransactionSessionTimeoutError,
    asyncpg.ReadOnlySQLTransactionError,  # connected to a standby or a demoted primary
    # A multi-host DSN's target_session_attrs matched no host: every one answered, none is
    # the primary yet (a failover under way, the standby not promoted).
    asyncpg.TargetServerAttributeNotMatched,
)

# The database is up, the statement lost a race or ran out of time: run it again.
RETRYABLE: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,  # 40P01
    asyncpg.SerializationError,  # 40001
    asyncpg.QueryCanceledError,  # 57014: statement_timeout
    asyncpg.LockNotAvailableError,  # 55P03: lock_timeout
)

NOT_MIGRATED: tuple[type[BaseException], ...] = (
    asyncpg.UndefinedTableError,
    asyncpg.InvalidSchemaNameError,
)


def is_closed_connection(exc: BaseException) -> bool:
    """asyncpg's errors for a connection the server has already left (the database is away,
    not a misuse), as a restart leaves them on pooled connections:

    - InterfaceError "... connection is closed": the loss was seen before the call;
    - InterfaceError "... connection has been released back to the pool": a held pooled
      connection that died is taken back by its pool at once, and its proxy refuses calls;
    - InternalClientError "cannot switch to state N; another operation (2) is in progress"
      (or "protocol is in the 'failed' state", "not connected"): the server's FATAL (57P01
      on a fast shutdown) reached an idle connection before its end did, and left the
      protocol waiting for a ready-for-query that never comes (``conn.transaction()``'s
      BEGIN, a statement, or the pool's reset on release fails so).
    """
    text = str(exc)
    if isinstance(exc, asyncpg.InternalClientError):
        return text.startswith("cannot switch to state") or text == "not connected"
    if not isinstance(exc, asyncpg.InterfaceError):
        return False
    return "connection" in text and ("closed" in text or "released back to the pool" in text)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def translate(exc: BaseException) -> TaskqError | None:
    """TaskQ's error for ``exc``, or None when it is not database trouble."""
    if isinstance(exc, TaskqError):
        return None
    if isinstance(exc, UNAVAILABLE) or is_closed_connection(exc):
        return DatabaseUnavailableError(f"PostgreSQL is unavailable ({_describe(exc)})")
    if isinstance(exc, RETRYABLE):
        return TransientDatabaseError(f"PostgreSQL asked for a retry ({_describe(exc)})")
    if isinstance(exc, NOT_MIGRATED):
        return SchemaNotMigratedError(
            f"the TaskQ schema is not migrated ({_describe(exc)}); run 'taskq migrate up'"
        )
    return None


def is_database_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` means the database is away or asked for a retry (either shape)."""
    if isinstance(exc, DatabaseUnavailableError | TransientDatabaseError):
        return True
    return isinstance(translate(exc), DatabaseUnavailableError | TransientDatabaseError)


def translated(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Wrap a coroutine function so that database trouble leaves it as TaskQ's errors."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc

    return wrapper


def translate_errors(cls: C) -> C:
    """Apply ``translated`` to every public coroutine method of ``cls``, inherited ones too
    (PostgresBackend is composed of parts); each is wrapped once, on ``cls``."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, member in list(vars(klass).items()):
            if name in seen or name.startswith("_"):
                continue
            seen.add(name)
            if inspect.iscoroutinefunction(member):
                setattr(cls, name, translated(member))
    return cls
