"""BackendCore: the pools, the named queries, the schema and the notifier every part shares.

Two DSNs (seeds, PgBouncer compatibility): the general pool, for statements and short
transactions, may route through a transaction-mode PgBouncer; everything that keeps state in
its session (LISTEN, the leader's and the sweeps' advisory locks) and the worker's dispatch and
heartbeat pools use the direct DSN. Which connection holds what: ``docs/pgbouncer.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any, Self, TypeVar, cast
from uuid import UUID

import asyncpg

from taskq_core.backend.hooks import NO_NOTIFY_HOOKS, NotifyHooks
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.worker import ScheduledAnnouncements
from taskq_core.constants import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    events_channel,
    leader_lock_key,
    validate_identifier,
    wake_channel,
)

from . import bulk, connection, rows
from .errors import is_database_trouble, translate
from .notify import NotifyListener
from .queries import SchemaQueries

T = TypeVar("T")

# Statements on the LISTEN and leader connections end within this when no command timeout is
# set: a hung connection must not hold leadership or the wake-ups hostage.
_DIRECT_QUERY_TIMEOUT = 10.0


def server_settings(schema: str, *, pooled: bool) -> dict[str, str]:
    """The session settings a pool's connections ask for at start-up.

    A connection through PgBouncer sends only ``application_name``: PgBouncer refuses any other
    start-up parameter it does not track ("unsupported startup parameter"), and the others
    would not last anyway, each transaction landing on whichever server session is free.
    """
    if pooled:
        return {"application_name": f"taskq_{schema}"}
    return {
        "application_name": f"taskq_{schema}",
        # Every statement here is prepared once per connection and shaped to suit one plan
        # whatever its parameters; without this the planner would re-plan the dispatch CTE
        # (milliseconds of planning) on every call.
        "plan_cache_mode": "force_generic_plan",
        # The generic plan's estimates are pessimistic enough to cross jit_above_cost: on a
        # server with JIT on, each dispatch would spend ~100 ms compiling a statement that
        # runs in ~1 ms. Short queue statements never gain from JIT.
        "jit": "off",
        **connection.SERVER_KEEPALIVES,
    }


async def one_on(conn: Any, query: str, *args: Any) -> asyncpg.Record:
    """The single row an aggregate statement always returns, read on ``conn``."""
    record = await conn.fetchrow(query, *args)
    if record is None:
        raise RuntimeError("a statement that always returns one row returned none")
    return cast(asyncpg.Record, record)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset query (advisory unlock, CLOSE, UNLISTEN, RESET).

    That query is a round trip after every pooled statement, and TaskQ's own statements leave
    no session state behind (LISTEN and the leader lock live on dedicated connections; settings
    are SET LOCAL). asyncpg still rolls back an open transaction before calling this. The one
    connection that user code touches, ``transaction()``'s, is reset there.
    """


async def _translating(step: Callable[[], Awaitable[T]]) -> T:
    """Call and await ``step``, turning database trouble into TaskQ's errors (the class
    decorator wraps coroutine methods, not this context manager's steps; asyncpg's
    transaction methods raise before returning an awaitable when the connection is gone)."""
    try:
        return await step()
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc


async def _reset_lent(conn: Any) -> None:
    """Full reset of a connection the caller used: whatever session state it left goes."""
    try:
        await conn.reset()
    except Exception:  # a connection that cannot be reset is not reused
        # One found dead is already detached from its proxy (the pool dropped it):
        # terminating it then raises InterfaceError, and there is nothing left to end.
        with contextlib.suppress(asyncpg.InterfaceError):
            conn.terminate()


class BackendCore:
    """What every part of PostgresBackend shares: its pools, queries, channels and notifier.

    The parts (``enqueue``, ``dispatch``, ``settle``, ``leader``, ``admin``) each add the
    operations of one concern over this state; ``backend.PostgresBackend`` is all of them.
    The leader's connection state lives here because ``close`` must step down first.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        schema: str,
        *,
        session_pool: asyncpg.Pool | None = None,
        dispatch_pool: asyncpg.Pool | None = None,
        heartbeat_pool: asyncpg.Pool | None = None,
        command_timeout: float | None = None,
        dispatch_oversample: int = 2,
        notify_health_check_interval: float = 5.0,
        notify_reconnect_backoff: float = 1.0,
        plain_dispatch: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        notify_hooks: NotifyHooks = NO_NOTIFY_HOOKS,
    ) -> None:
        """Wrap open pools whose connections ran ``_init_connection``; prefer ``connect``.

        ``dsn`` is the direct DSN, a real libpq one (not ``embedded``): the LISTEN and leader
        connections open it. ``pool`` serves statements and short transactions and may go
        through PgBouncer; ``session_pool`` (default ``pool``) is on the direct DSN and holds
        the sweeps' session locks. Dispatch runs on ``dispatch_pool`` and the heartbeat on
        ``heartbeat_pool`` when given (else ``session_pool``), so neither waits behind the
        other's traffic (or behind settle writes). ``plain_dispatch=False`` always claims
        through the general statement (the tests run both). ``max_payload_bytes``: the
        largest payload an enqueue accepts (``protocol.sizes``). ``notify_hooks``: what the
        LISTEN connection reports to (``backend.hooks``; the factory installs telemetry).
        """
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        self.schema = validate_identifier(schema)
        self.max_payload_bytes = max_payload_bytes
        self._pool = pool
        # A session pool of its own means ``pool`` is on the pooled DSN (maybe PgBouncer).
        self._through_pooler = session_pool is not None and session_pool is not pool
        self._session_pool = session_pool or pool
        self._dispatch_pool = dispatch_pool or self._session_pool
        self._heartbeat_pool = heartbeat_pool or self._session_pool
        self._direct_dsn = dsn
        self._command_timeout = command_timeout
        self._queries = SchemaQueries(schema)
        self._oversample = dispatch_oversample
        self._plain_dispatch = plain_dispatch
        self._plain_retry_at = 0.0  # monotonic time from which dispatch_plain is tried again
        self._wake_channel = wake_channel(schema)
        self._events_channel = events_channel(schema)
        self._leader_key = leader_lock_key(schema)
        self._leader_conn: asyncpg.Connection | None = None
        self._leader_worker: UUID | None = None
        self._leader_lock = asyncio.Lock()
        # The idle_session_timeout set on the leader connection, and whether the server
        # refused it (logged once): see leader.LeaderPart._apply_session_lease.
        self._leader_session_lease: timedelta | None = None
        self._leader_lease_refused = False
        self._closed = False
        self.listener = NotifyListener(
            lambda: self._open_direct_connection(f"taskq_listen_{schema}"),
            schema,
            health_check_interval=notify_health_check_interval,
            initial_backoff=notify_reconnect_backoff,
            hooks=notify_hooks,
        )

    # ``connect`` repeats ``__init__``'s tuning keywords on purpose and hands them through:
    # one call opens the pools and builds the backend. (Its head and its hand-through are alike
    # protocol/worker.py's mark_succeeded and memory/store.py's _add_attempt_row by shape only.)
    @classmethod
    async def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        direct_dsn: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        dispatch_pool_size: int | None = None,
        heartbeat_pool_size: int | None = None,
        # The tuning keywords below repeat __init__'s on purpose: connect passes them on.
        command_timeout: float | None = None,
        max_inactive_lifetime: float = 300.0,
        dispatch_oversample: int = 2,
        notify_health_check_interval: float = 5.0,
        notify_reconnect_backoff: float = 1.0,
        plain_dispatch: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        notify_hooks: NotifyHooks = NO_NOTIFY_HOOKS,
    ) -> Self:
        """Open pools on ``dsn`` (``embedded`` DSNs start their server) for ``schema``.

        One pool of ``min_size``..``max_size`` connections on ``dsn``, plus a dispatch and a
        heartbeat pool of their own on ``direct_dsn`` when their sizes are given (a worker
        gives them). A ``direct_dsn`` other than ``dsn`` makes ``dsn`` the pooled DSN: its
        pool keeps no prepared statements and sends no session settings (PgBouncer's
        transaction mode hands each transaction a different server session), and a pool on
        ``direct_dsn`` that opens connections only when asked holds the session locks.
        Statements that take longer than ``command_timeout`` seconds are cancelled and raise
        DatabaseUnavailableError (a hung connection, a partition). Connection failures
        raise one-line DatabaseUnavailableError / ConfigError. ``max_payload_bytes``: the
        largest payload an enqueue accepts (TASKQ_MAX_PAYLOAD_BYTES). ``notify_hooks``: the
        LISTEN connection's telemetry (``backend.hooks``).
        """
        validate_identifier(schema)
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        real_dsn = connection.prepare_dsn(dsn)
        real_direct = real_dsn if direct_dsn in (None, dsn) else connection.prepare_dsn(direct_dsn)
        split = real_direct != real_dsn
        direct: dict[str, Any] = {
            "init": rows.init_connection,
            "reset": _keep_session,
            "command_timeout": command_timeout,
            "max_inactive_connection_lifetime": max_inactive_lifetime,
            "server_settings": server_settings(schema, pooled=False),
        }
        # PgBouncer before 1.21 keeps no prepared statements: asyncpg's cache would name a
        # statement prepared on one server session and execute it on another. Without the
        # cache asyncpg sends each statement unnamed, parsed again in the same round trip
        # that runs it (measured in docs/pgbouncer.md).
        pooled = {
            **direct,
            "server_settings": server_settings(schema, pooled=True),
            "statement_cache_size": 0,
        }
        opened: list[asyncpg.Pool] = []
        try:
            pool = await connection.create_pool(
                real_dsn,
                min_size=min(min_size, max_size),
                max_size=max_size,
                **(pooled if split else direct),
            )
            opened.append(pool)
            pools: dict[str, asyncpg.Pool] = {}
            if split:
                pools["session"] = await connection.create_pool(
                    real_direct, min_size=0, max_size=max(2, min(max_size, 4)), **direct
                )
                opened.append(pools["session"])
            sizes = {"dispatch": dispatch_pool_size, "heartbeat": heartbeat_pool_size}
            for role, size in sizes.items():
                if size is not None:
                    pools[role] = await connection.create_pool(
                        real_direct, min_size=1, max_size=size, **direct
                    )
                    opened.append(pools[role])
        except BaseException:
            for each in opened:
                each.terminate()
            raise
        return cls(
            pool,
            real_direct,
            schema,
            session_pool=pools.get("session"),
            dispatch_pool=pools.get("dispatch"),
            heartbeat_pool=pools.get("heartbeat"),
            command_timeout=command_timeout,
            dispatch_oversample=dispatch_oversample,
            notify_health_check_interval=notify_health_check_interval,
            notify_reconnect_backoff=notify_reconnect_backoff,
            plain_dispatch=plain_dispatch,
            max_payload_bytes=max_payload_bytes,
            notify_hooks=notify_hooks,
        )

    def _pools(self) -> list[asyncpg.Pool]:
        """Every distinct pool this backend owns."""
        pools = (self._pool, self._session_pool, self._dispatch_pool, self._heartbeat_pool)
        return list({id(pool): pool for pool in pools}.values())

    async def _in_batches(
        self,
        query: str,
        batch_size: int,
        *args: object,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Run a bounded sweep statement (its last parameter the batch size) until a batch
        touches fewer rows than that; each statement outside a transaction block commits on
        its own. Returns the rows touched in all."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        total = 0
        while True:
            count = int(await self._pool.fetchval(self._queries[query], *args, batch_size))
            total += count
            if on_batch is not None:
                on_batch(count)
            if count < batch_size:
                return total

    async def _log_operator(
        self, conn: Any, action: str, target: str, audit: Audit, detail: dict[str, Any]
    ) -> None:
        """The operator_log row of an operator write (who and why from ``audit``), on
        ``conn``: in the write's transaction, so the two commit together."""
        await conn.execute(
            self._queries["insert_operator_log"],
            action,
            target,
            audit.by,
            audit.reason,
            bulk.dumps(detail),
        )

    async def _one(self, query: str, *args: Any) -> asyncpg.Record:
        """The single row an aggregate statement always returns."""
        record = await self._pool.fetchrow(query, *args)
        if record is None:
            raise RuntimeError("a statement that always returns one row returned none")
        return record

    async def _open_direct_connection(self, application_name: str) -> asyncpg.Connection:
        """A connection outside the pools on the direct DSN (LISTEN, leader lock), named for
        pg_stat_activity."""
        return await connection.connect(
            self._direct_dsn,
            command_timeout=self._command_timeout or _DIRECT_QUERY_TIMEOUT,
            server_settings={"application_name": application_name, **connection.SERVER_KEEPALIVES},
        )

    async def close(self) -> None:
        """Close the LISTEN connection and the pools; idempotent (the leader part steps
        down first, see ``leader.LeaderPart.close``)."""
        if self._closed:
            return
        self._closed = True
        await self.listener.close()
        for pool in self._pools():
            await pool.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A pool connection inside a transaction; pass it as ``connection=``. Through a
        transaction-mode PgBouncer only what the transaction does is the caller's: a plain
        ``SET`` (not ``SET LOCAL``) would outlive it on a server session others share."""
        conn = await _translating(self._pool.acquire)
        try:
            transaction = conn.transaction()
            await _translating(transaction.start)
            try:
                yield conn
            except BaseException:
                try:
                    await transaction.rollback()
                except Exception as exc:
                    # A connection lost mid-transaction took the transaction with it: what
                    # ended the body is the error to raise, not the rollback's.
                    if not is_database_trouble(exc):
                        raise
                raise
            await _translating(transaction.commit)
        finally:
            # Through PgBouncer a reset would run on whichever server session is free, and its
            # RESET ALL desynchronizes the parameters PgBouncer tracks per client
            # (application_name reads '' ever after): the session is PgBouncer's to keep.
            if not self._through_pooler:
                await _reset_lent(conn)
            await self._pool.release(conn)

    # --- wake-ups ----------------------------------------------------------------------------
    def subscribe_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever new dispatchable work may exist (wake NOTIFY)."""
        return self.listener.subscribe_wake()

    def subscribe_cancel_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever a cancel request is written (events NOTIFY)."""
        return self.listener.subscribe_cancel_wake()

    def subscribe_scheduled(self) -> AbstractAsyncContextManager[ScheduledAnnouncements]:
        """Announcements of jobs that wait for a time (events NOTIFY)."""
        return self.listener.subscribe_scheduled()
