"""Opening connections and pools: DSN resolution (embedded), one-line connection errors."""

from __future__ import annotations

import socket
from collections.abc import Awaitable
from typing import Any, TypeVar

import asyncpg

from taskq_core.credentials import scrub
from taskq_core.dsn import describe_dsn
from taskq_core.dsn import prepare_dsn as prepare_dsn  # core.py resolves pool DSNs with it
from taskq_core.errors import ConfigError, DatabaseUnavailableError

T = TypeVar("T")

# TCP keepalives on both ends, so a connection whose peer vanished (a partition, a host that
# died without closing) is found dead within about a minute instead of hanging until the
# kernel gives up hours later. The server's side is a per-session setting; the client's is a
# socket option. Both are ignored on Unix sockets.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": str(KEEPALIVE_IDLE),
    "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL),
    "tcp_keepalives_count": str(KEEPALIVE_COUNT),
}
# A connection attempt that gets no answer (a partition drops the SYN) fails after this.
CONNECT_TIMEOUT = 10.0

_ZERO_SETUP_HINT = (
    "set TASKQ_PG_DSN (or --dsn), or use TASKQ_PG_DSN=embedded for a zero-setup database"
)


async def _guard(dsn: str, pending: Awaitable[T]) -> T:
    try:
        return await pending
    except (
        OSError,
        asyncpg.CannotConnectNowError,
        asyncpg.TooManyConnectionsError,
        asyncpg.TargetServerAttributeNotMatched,  # a multi-host DSN found no primary
    ) as exc:
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
    except ValueError as exc:  # asyncpg's DSN parser (validate_dsn lets few through)
        # Its messages may quote pieces of the DSN: the password masked, the original not
        # chained (a --debug traceback would print it).
        reason = scrub(str(exc), dsn)
        raise ConfigError(f"invalid DSN for {describe_dsn(dsn)}: {reason}") from None


def enable_keepalive(conn: asyncpg.Connection) -> None:
    """Turn on client-side TCP keepalives for ``conn`` (no-op on Unix sockets).

    asyncpg has no option for it, so the socket comes from the connection's transport.
    """
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


async def connect(
    dsn: str, *, timeout: float = CONNECT_TIMEOUT, **kwargs: Any
) -> asyncpg.Connection:
    """One connection to ``dsn`` (embedded resolved, keepalives on); failures become
    one-line errors."""
    real = prepare_dsn(dsn)
    conn: asyncpg.Connection = await _guard(dsn, asyncpg.connect(real, timeout=timeout, **kwargs))
    enable_keepalive(conn)
    return conn


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any
) -> asyncpg.Pool:
    """A pool on ``dsn`` (embedded resolved, keepalives on every connection); failures
    become one-line errors."""
    real = prepare_dsn(dsn)
    init = kwargs.pop("init", None)

    async def init_connection(conn: asyncpg.Connection) -> None:
        enable_keepalive(conn)
        if init is not None:
            await init(conn)

    kwargs.setdefault("timeout", CONNECT_TIMEOUT)
    pool = asyncpg.create_pool(
        real, min_size=min_size, max_size=max_size, init=init_connection, **kwargs
    )
    return await _guard(dsn, pool)
