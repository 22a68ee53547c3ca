"""Which database errors a long-lived loop should shrug off, and a guard for everything else.

TRANSIENT_PG_ERRORS is the single definition of 'PostgreSQL is having a moment: log, retry
next tick'. Anything else goes through UnexpectedErrorGuard: tolerated with a loud record,
but re-raised after ``max_consecutive`` unexpected errors in a row, so a permanent fault
kills the worker instead of leaving a zombie that ticks but does no work.
"""

from __future__ import annotations

from typing import Any

import asyncpg

TRANSIENT_PG_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.QueryCanceledError,
    asyncpg.AdminShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    asyncpg.IdleSessionTimeoutError,
    asyncpg.IdleInTransactionSessionTimeoutError,
)


class UnexpectedErrorGuard:
    """Counts consecutive unexpected errors of one loop; raises past the limit."""

    def __init__(self, loop_name: str, log: Any, *, max_consecutive: int = 5) -> None:
        self.loop_name = loop_name
        self.log = log
        self.max_consecutive = max_consecutive
        self.streak = 0

    def succeeded(self) -> None:
        """A fully successful iteration resets the streak."""
        self.streak = 0

    def failed(self, exc: Exception) -> None:
        """Log an unexpected error; re-raise it once the streak reaches the limit."""
        self.streak += 1
        self.log.error(
            "loop_unexpected_error",
            loop=self.loop_name,
            error=repr(exc),
            streak=self.streak,
            exc_info=exc,
        )
        if self.streak >= self.max_consecutive:
            raise exc
