"""The backend's error translation: every shape a PostgreSQL restart leaves on a pooled
connection is the database being away (DatabaseUnavailableError), nothing else is."""

from __future__ import annotations

import asyncpg
import pytest

from taskq_core.backend.postgres.errors import translate
from taskq_core.errors import DatabaseUnavailableError

# Seen on pooled connections across fast restarts (tests/e2e/test_pg_restarts_under_failures.py).
RESTART_SHAPES = [
    asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
    asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    asyncpg.InternalClientError('cannot switch to state 15; protocol is in the "failed" state'),
    asyncpg.InternalClientError("not connected"),
    asyncpg.InterfaceError(
        "cannot call Connection.transaction(): connection has been released back to the pool"
    ),
    asyncpg.InterfaceError(
        "cannot call Transaction.__aexit__(): the underlying connection is closed"
    ),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.CannotConnectNowError("the database system is starting up"),
]


@pytest.mark.parametrize("exc", RESTART_SHAPES, ids=lambda exc: str(exc)[:40])
def test_a_restart_shape_is_the_database_away(exc: Exception) -> None:
    assert isinstance(translate(exc), DatabaseUnavailableError)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        asyncpg.InternalClientError("unexpected message type"),
        asyncpg.UniqueViolationError("duplicate key value"),
    ],
    ids=lambda exc: str(exc)[:40],
)
def test_a_misuse_or_a_bug_is_not(exc: Exception) -> None:
    assert translate(exc) is None
