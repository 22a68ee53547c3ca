"""Opening connections and pools: DSN resolution (embedded), one-line connection errors."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg

from taskq_core.embedded import is_embedded_dsn, resolve_dsn
from taskq_core.errors import ConfigError, DatabaseUnavailableError
from taskq_core.settings import validate_dsn

T = TypeVar("T")

_ZERO_SETUP_HINT = (
    "set TASKQ_PG_DSN (or --dsn), or use TASKQ_PG_DSN=embedded for a zero-setup database"
)


def describe_dsn(dsn: str) -> str:
    """Where a DSN points, without credentials: ``host:port/db`` or the embedded directory."""
    if is_embedded_dsn(dsn):
        return dsn
    parts = urlsplit(dsn)
    host = parts.hostname or re.sub(r".*host=([^&]+).*", r"\1", parts.query) or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path}"


def prepare_dsn(dsn: str) -> str:
    """Validate ``dsn`` and resolve an embedded one to a real URI (starting its server)."""
    try:
        checked = validate_dsn(dsn)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return resolve_dsn(checked)


async def _guard(dsn: str, pending: Awaitable[T]) -> T:
    try:
        return await pending
    except (OSError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError) as exc:
        if isinstance(exc, ConnectionRefusedError):
            reason = "connection refused"
        elif isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        else:
            reason = str(exc) or type(exc).__name__
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)} ({reason}); {_ZERO_SETUP_HINT}"
        ) from exc
    except TimeoutError as exc:
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)} (timed out); {_ZERO_SETUP_HINT}"
        ) from exc
    except (
        asyncpg.InvalidAuthorizationSpecificationError,
        asyncpg.InvalidPasswordError,
        asyncpg.InvalidCatalogNameError,
    ) as exc:
        raise DatabaseUnavailableError(
            f"PostgreSQL at {describe_dsn(dsn)} refused the connection ({exc}); {_ZERO_SETUP_HINT}"
        ) from exc
    except ValueError as exc:  # asyncpg's DSN parser
        raise ConfigError(f"invalid DSN: {exc}") from exc


async def connect(dsn: str, *, timeout: float = 10.0, **kwargs: Any) -> asyncpg.Connection:
    """One connection to ``dsn`` (embedded resolved); failures become one-line errors."""
    real = prepare_dsn(dsn)
    return await _guard(dsn, asyncpg.connect(real, timeout=timeout, **kwargs))


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any
) -> asyncpg.Pool:
    """A pool on ``dsn`` (embedded resolved); failures become one-line errors."""
    real = prepare_dsn(dsn)
    pool = asyncpg.create_pool(real, min_size=min_size, max_size=max_size, **kwargs)
    return await _guard(dsn, pool)
