"""PostgresBackend: the Backend protocol over asyncpg, one named query per operation.

Every operation is one statement (one round trip); a status change, its job_attempts row and
its job_events row are written together by data-modifying CTEs, and every time predicate
reads the database clock. The backend owns a pool (with a jsonb codec, so JSON columns are
Python objects), a lazily opened LISTEN connection (``notify.py``) and, while it leads, one
dedicated connection holding the maintenance leader's session advisory lock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast
from uuid import UUID

import asyncpg

from taskq_core import jsontext
from taskq_core.backend.protocol import (
    UNSET,
    ActorConfigDrift,
    ActorConfigRow,
    ActorConfigSyncResult,
    ActorDeclaration,
    AttemptRow,
    BulkCancelResult,
    CancelFlag,
    CancelOutcome,
    DashboardStats,
    DispatchPosition,
    EnqueueArgs,
    ErrorInfo,
    EventRow,
    HeartbeatResult,
    JobFilter,
    JobRow,
    LeaderRow,
    Lease,
    QueueActivity,
    QueueMode,
    QueueRow,
    QueueStatusCount,
    RetryAfterOutcome,
    SnoozeOutcome,
    Start,
    Success,
    WorkerInfo,
    WorkerRow,
    check_dashboard_window,
    check_protocol_version,
    check_recent_limit,
    from_values,
)
from taskq_core.constants import (
    RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS,
    UNSTARTED_RECLAIM_LIMIT,
    events_channel,
    leader_lock_key,
    validate_identifier,
    wake_channel,
)
from taskq_core.ids import uuid7, uuid7_batch_ints
from taskq_core.obs.logs import get_logger
from taskq_core.statemachine import JobStatus

from . import bulk, connection
from .errors import is_database_trouble, translate_errors
from .notify import NotifyListener
from .queries import SchemaQueries

if TYPE_CHECKING:
    from taskq_core.backend.protocol import Backend

_IMPLEMENTED_PROTOCOL_VERSION = 2
check_protocol_version("PostgresBackend", _IMPLEMENTED_PROTOCOL_VERSION)

_log = get_logger("postgres_backend")
_RETRY_KINDS = frozenset({"transient", "indefinite", "non_retryable"})
_QUEUE_MODES = frozenset({"strict_fifo", "round_robin"})
_JOB_FIELDS = tuple(f.name for f in fields(JobRow))
_STATUS_INDEX = _JOB_FIELDS.index("status")
_JOB_STATUS = {status.value: status for status in JobStatus}
_TEXT_JSON_INDEXES = tuple(
    _JOB_FIELDS.index(name) for name in ("payload", "result", "metadata", "progress_state")
)
_ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRow))
_ACTOR_CONFIG_FIELDS = tuple(f.name for f in fields(ActorConfigRow))
_CAPACITY_FIELDS = ("max_concurrent", "max_pending", "result_ttl")
# Statements on the LISTEN and leader connections end within this when no command timeout is
# set: a hung connection must not hold leadership or the wake-ups hostage.
_DIRECT_QUERY_TIMEOUT = 10.0


# --- JSON -----------------------------------------------------------------------------------
_dumps = bulk.dumps  # JSON text as jsonb stores it; NaN and non-JSON values raise


def _encode_jsonb(value: Any) -> bytes:
    return b"\x01" + _dumps(value).encode()  # jsonb binary format: version byte, then text


_EMPTY_JSONB = b"\x01{}"  # the usual payload and metadata


def _decode_jsonb(data: bytes) -> Any:
    if data == _EMPTY_JSONB:
        return {}
    return json.loads(data[1:])


def _encode_json(value: Any) -> bytes:
    return _dumps(value).encode()


async def _init_connection(conn: asyncpg.Connection) -> None:
    """Pool connection set-up: JSON columns in and out as Python objects (binary format)."""
    await conn.set_type_codec(
        "jsonb",
        encoder=_encode_jsonb,
        decoder=_decode_jsonb,
        schema="pg_catalog",
        format="binary",
    )
    await conn.set_type_codec(
        "json", encoder=_encode_json, decoder=json.loads, schema="pg_catalog", format="binary"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset query (advisory unlock, CLOSE, UNLISTEN, RESET).

    That query is a round trip after every pooled statement, and TaskQ's own statements leave
    no session state behind (LISTEN and the leader lock live on dedicated connections; settings
    are SET LOCAL). asyncpg still rolls back an open transaction before calling this. The one
    connection that user code touches, ``transaction()``'s, is reset there.
    """


async def _reset_lent(conn: Any) -> None:
    """Full reset of a connection the caller used: whatever session state it left goes."""
    try:
        await conn.reset()
    except Exception:  # a connection that cannot be reset is not reused
        conn.terminate()


# --- records -> protocol rows ----------------------------------------------------------------
def _job(record: asyncpg.Record) -> JobRow:
    values = list(map(record.__getitem__, _JOB_FIELDS))
    values[_STATUS_INDEX] = _JOB_STATUS[values[_STATUS_INDEX]]
    return from_values(JobRow, values)


def _job_from_text_json(record: asyncpg.Record) -> JobRow:
    """A row whose JSON columns came back as text (the codec-independent enqueue queries)."""
    values = list(map(record.__getitem__, _JOB_FIELDS))
    values[_STATUS_INDEX] = _JOB_STATUS[values[_STATUS_INDEX]]
    for index in _TEXT_JSON_INDEXES:
        if values[index] is not None:
            values[index] = json.loads(values[index])
    return from_values(JobRow, values)


def _attempt(record: asyncpg.Record) -> AttemptRow:
    return AttemptRow(**{name: record[name] for name in _ATTEMPT_FIELDS})


def _event(record: asyncpg.Record) -> EventRow:
    from_status, to_status = record["from_status"], record["to_status"]
    return EventRow(
        id=record["id"],
        job_id=record["job_id"],
        occurred_at=record["occurred_at"],
        kind=record["kind"],
        from_status=None if from_status is None else JobStatus(from_status),
        to_status=None if to_status is None else JobStatus(to_status),
        worker_id=record["worker_id"],
        detail=record["detail"],
    )


def _actor_config(record: asyncpg.Record) -> ActorConfigRow:
    return ActorConfigRow(**{name: record[name] for name in _ACTOR_CONFIG_FIELDS})


def _queue(record: asyncpg.Record) -> QueueRow:
    return QueueRow(
        name=record["name"],
        mode=record["mode"],
        max_concurrent=record["max_concurrent"],
        paused=record["paused"],
        has_row=record["has_row"],
        counts={
            JobStatus(status): count
            for status, count in zip(record["statuses"], record["counts"], strict=True)
        },
    )


def _worker(record: asyncpg.Record) -> WorkerRow:
    return WorkerRow(
        id=record["id"],
        hostname=record["hostname"],
        pid=record["pid"],
        label=record["worker_label"],
        workgroup_instance=record["workgroup_instance"],
        queues=list(record["queues"]),
        actors=list(record["actors"]),
        concurrency=record["concurrency"],
        version=record["version"],
        started_at=record["started_at"],
        last_seen_at=record["last_seen_at"],
        stopped_at=record["stopped_at"],
        status=record["status"],
        is_leader=record["is_leader"],
        running_jobs=record["running_jobs"],
        claimed_jobs=record["claimed_jobs"],
    )


def _queue_activity(record: asyncpg.Record, minutes: int) -> QueueActivity:
    per_minute = [0] * minutes
    for minute_ago, count in zip(record["minutes_ago"], record["minute_counts"], strict=True):
        per_minute[minutes - 1 - minute_ago] = count  # oldest first
    return QueueActivity(
        name=record["name"],
        mode=record["mode"],
        max_concurrent=record["max_concurrent"],
        paused=record["paused"],
        pending=record["pending"],
        scheduled=record["scheduled"],
        running=record["running"],
        claimed=record["claimed"],
        oldest_pending_at=record["oldest_pending_at"],
        finished={
            JobStatus(status): count
            for status, count in zip(
                record["finished_statuses"], record["finished_counts"], strict=True
            )
        },
        finished_per_minute=per_minute,
    )


# --- enqueue helpers --------------------------------------------------------------------------
def _validate(args: EnqueueArgs) -> None:
    """Reject an item as the schema's CHECK constraints would, before anything is sent."""
    if args.max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {args.max_attempts}")
    if args.retry_kind not in _RETRY_KINDS:
        raise ValueError(f"unknown retry_kind {args.retry_kind!r}")


def _check(args: EnqueueArgs) -> UUID:
    """Validate one item and return its (possibly new) job id."""
    _validate(args)
    return args.job_id or uuid7()


_ZERO = timedelta(0)
_STATUS_ON_ENQUEUE = {False: JobStatus.PENDING, True: JobStatus.SCHEDULED}


def _is_delayed(args: EnqueueArgs) -> bool:
    return args.delay is not None and args.delay > _ZERO


def _inserted_row(
    args: EnqueueArgs, job_id: UUID, payload: bytes, metadata: bytes, now: datetime
) -> JobRow:
    """The row a bulk-enqueued item became: the item, the batch's clock reading, defaults."""
    delay = args.delay
    delayed = _is_delayed(args)
    deadline = args.schedule_to_close
    # Every JobRow field in declaration order (see protocol.JobRow).
    return from_values(
        JobRow,
        (
            job_id,
            args.actor,
            args.queue,
            bulk.jsonb_field_value(payload),
            _STATUS_ON_ENQUEUE[delayed],
            args.priority,
            now + delay if delayed and delay is not None else now,  # scheduled_at
            now,  # created_at
            args.retry_kind,
            args.max_attempts,
            0,  # attempt
            None,  # locked_by_worker
            None,  # lock_expires_at
            None,  # claimed_at
            None,  # started_at
            None,  # finished_at
            0,  # cancel_phase
            None,  # cancel_requested_at
            None,  # cancel_reason
            args.identity_key,
            args.fairness_key,
            None if deadline is None else now + deadline,  # schedule_to_close
            None,  # result
            args.result_ttl,
            None,  # result_expires_at
            None,  # error_class
            None,  # error_message
            None,  # error_traceback
            bulk.jsonb_field_value(metadata),
            args.trace_id,
            args.span_id,
            0,  # progress_seq
            None,  # progress_state
            now,  # updated_at
        ),
    )


def _statuses(filter: JobFilter) -> list[str] | None:
    allowed = filter.statuses()
    return None if allowed is None else sorted(s.value for s in allowed)


def _filter_args(filter: JobFilter) -> tuple[Any, ...]:
    """($1 statuses, $2 queue, $3 actor, $4 ids, $5 limit) as the filter queries take them."""
    ids = None if filter.ids is None else list(filter.ids)
    return (_statuses(filter), filter.queue, filter.actor, ids, filter.limit)


# Rows per COPY data message: a batch goes out in about four slices (so even a small one
# overlaps its encoding with the server's inserts), of 250 to 1,000 rows.
_COPY_SLICE_ROWS = (250, 1000)

# How long dispatch skips `dispatch_plain` once it found caps or round_robin queues.
_PLAIN_RETRY_SECONDS = 5.0


@dataclass(slots=True)
class _CopyBatch:
    """A bulk enqueue, prepared and streamed to the server a slice at a time.

    Each slice is validated, given its ids, serialized and encoded while the server inserts
    the slice before it (two cores at work, not one after the other); for ``enqueue_batch``
    the JobRows are built in the same pass. Items are encoded one by one as they are read, so
    nothing per item outlives its row unless the rows are asked for (no work for the garbage
    collector). An invalid item ends the stream early (with a well-formed trailer) and is
    raised once the COPY returns, inside its transaction, so the whole batch rolls back: a
    batch commits entirely or not at all.
    """

    args_list: Sequence[EnqueueArgs]
    rows: list[JobRow] | None
    error: Exception | None = None
    wake: bool = False  # some job of the batch is dispatchable now

    async def stream(self, now: datetime) -> AsyncIterator[bytes]:
        encoder = bulk.RowEncoder(now)
        count = len(self.args_list)
        least, most = _COPY_SLICE_ROWS
        step = min(most, max(least, -(-count // 4)))
        items = iter(self.args_list)  # a client's batch builds each item here
        data = bulk.HEADER
        for start in range(0, count, step):
            try:
                size = min(step, count - start)
                data += self._encode(encoder, itertools.islice(items, size), size, now)
            except Exception as exc:  # raised by _copy_in, after the COPY, to roll it back
                self.error = exc
                break
            if start + step < count:
                yield data
                data = b""
        yield data + bulk.TRAILER

    def _encode(
        self, encoder: bulk.RowEncoder, items: Iterable[EnqueueArgs], size: int, now: datetime
    ) -> bytes:
        """The rows of a slice of ``size`` items; appends their JobRows when asked for."""
        parts: list[bytes] = []
        rows = self.rows
        fresh = iter(uuid7_batch_ints(size))  # an item with its own id leaves one unused
        for args in items:
            _validate(args)
            job_id = next(fresh) if args.job_id is None else args.job_id.int
            payload = bulk.jsonb_field(args.payload)
            metadata = bulk.jsonb_field(args.metadata)
            parts.append(encoder.row(args, job_id, payload, metadata))
            if not self.wake and not _is_delayed(args):
                self.wake = True
            if rows is not None:
                rows.append(_inserted_row(args, UUID(int=job_id), payload, metadata, now))
        return b"".join(parts)


@translate_errors
class PostgresBackend:
    """The Backend protocol on PostgreSQL. Build one with ``await PostgresBackend.connect()``.

    Every public coroutine raises TaskQ's errors for database trouble, never asyncpg's
    (``errors.translate_errors``): DatabaseUnavailableError, TransientDatabaseError,
    SchemaNotMigratedError.
    """

    BACKEND_PROTOCOL_VERSION: ClassVar[int] = _IMPLEMENTED_PROTOCOL_VERSION
    supports_transactional_simulation: ClassVar[bool] = False

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        schema: str,
        *,
        dispatch_pool: asyncpg.Pool | None = None,
        heartbeat_pool: asyncpg.Pool | None = None,
        command_timeout: float | None = None,
        dispatch_oversample: int = 2,
        notify_health_check_interval: float = 5.0,
        notify_reconnect_backoff: float = 1.0,
        plain_dispatch: bool = True,
    ) -> None:
        """Wrap open pools whose connections ran ``_init_connection``; prefer ``connect``.

        ``dsn`` must be a real libpq DSN (not ``embedded``): the LISTEN and leader
        connections open it directly. Dispatch runs on ``dispatch_pool`` and the heartbeat on
        ``heartbeat_pool`` when given, so neither waits behind the other's traffic (or behind
        settle writes); everything else uses ``pool``. ``plain_dispatch=False`` always claims
        through the general statement (the tests run both).
        """
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        self.schema = validate_identifier(schema)
        self._pool = pool
        self._dispatch_pool = dispatch_pool or pool
        self._heartbeat_pool = heartbeat_pool or pool
        self._dsn = dsn
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
        self._closed = False
        self.listener = NotifyListener(
            lambda: self._open_direct_connection(f"taskq_listen_{schema}"),
            schema,
            health_check_interval=notify_health_check_interval,
            initial_backoff=notify_reconnect_backoff,
        )

    @classmethod
    async def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        dispatch_pool_size: int | None = None,
        heartbeat_pool_size: int | None = None,
        command_timeout: float | None = None,
        max_inactive_lifetime: float = 300.0,
        dispatch_oversample: int = 2,
        notify_health_check_interval: float = 5.0,
        notify_reconnect_backoff: float = 1.0,
        plain_dispatch: bool = True,
    ) -> PostgresBackend:
        """Open pools on ``dsn`` (``embedded`` DSNs start their server) for ``schema``.

        One pool of ``min_size``..``max_size`` connections, plus a dispatch and a heartbeat
        pool of their own when their sizes are given (a worker gives them). Statements
        that take longer than ``command_timeout`` seconds are cancelled and raise
        DatabaseUnavailableError (a hung connection, a partition). Connection failures
        raise one-line DatabaseUnavailableError / ConfigError.
        """
        validate_identifier(schema)
        if dispatch_oversample < 1:
            raise ValueError("dispatch_oversample must be at least 1")
        real_dsn = connection.prepare_dsn(dsn)
        options: dict[str, Any] = {
            "init": _init_connection,
            "reset": _keep_session,
            "command_timeout": command_timeout,
            "max_inactive_connection_lifetime": max_inactive_lifetime,
            "server_settings": {
                "application_name": f"taskq_{schema}",
                # Every statement here is prepared once per connection and shaped to suit
                # one plan whatever its parameters; without this the planner would re-plan
                # the dispatch CTE (milliseconds of planning) on every call.
                "plan_cache_mode": "force_generic_plan",
                # The generic plan's estimates are pessimistic enough to cross jit_above_cost:
                # on a server with JIT on, each dispatch would spend ~100 ms compiling a
                # statement that runs in ~1 ms. Short queue statements never gain from JIT.
                "jit": "off",
                **connection.SERVER_KEEPALIVES,
            },
        }
        opened: list[asyncpg.Pool] = []
        try:
            pool = await connection.create_pool(
                real_dsn, min_size=min(min_size, max_size), max_size=max_size, **options
            )
            opened.append(pool)
            pools: dict[str, asyncpg.Pool] = {}
            sizes = {"dispatch": dispatch_pool_size, "heartbeat": heartbeat_pool_size}
            for role, size in sizes.items():
                if size is not None:
                    pools[role] = await connection.create_pool(
                        real_dsn, min_size=1, max_size=size, **options
                    )
                    opened.append(pools[role])
        except BaseException:
            for each in opened:
                each.terminate()
            raise
        return cls(
            pool,
            real_dsn,
            schema,
            dispatch_pool=pools.get("dispatch"),
            heartbeat_pool=pools.get("heartbeat"),
            command_timeout=command_timeout,
            dispatch_oversample=dispatch_oversample,
            notify_health_check_interval=notify_health_check_interval,
            notify_reconnect_backoff=notify_reconnect_backoff,
            plain_dispatch=plain_dispatch,
        )

    def _pools(self) -> list[asyncpg.Pool]:
        """Every distinct pool this backend owns."""
        pools = (self._pool, self._dispatch_pool, self._heartbeat_pool)
        return list({id(pool): pool for pool in pools}.values())

    async def _one(self, query: str, *args: Any) -> asyncpg.Record:
        """The single row an aggregate statement always returns."""
        record = await self._pool.fetchrow(query, *args)
        if record is None:
            raise RuntimeError("a statement that always returns one row returned none")
        return record

    async def _open_direct_connection(self, application_name: str) -> asyncpg.Connection:
        """A connection outside the pool (LISTEN, leader lock), named for pg_stat_activity."""
        return await connection.connect(
            self._dsn,
            command_timeout=self._command_timeout or _DIRECT_QUERY_TIMEOUT,
            server_settings={"application_name": application_name, **connection.SERVER_KEEPALIVES},
        )

    async def close(self) -> None:
        """Release leadership, the LISTEN connection and the pool; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._leader_worker is not None:
            await self.release_leadership(self._leader_worker)
        await self._drop_leader_connection()
        await self.listener.close()
        for pool in self._pools():
            await pool.close()

    # --- enqueue -----------------------------------------------------------------------------
    def _enqueue_params(self, args: EnqueueArgs) -> tuple[Any, ...]:
        return (
            _check(args),
            args.actor,
            args.queue,
            _dumps(args.payload),
            args.priority,
            args.delay,
            args.identity_key,
            args.fairness_key,
            args.schedule_to_close,
            args.retry_kind,
            args.max_attempts,
            args.result_ttl,
            _dumps(args.metadata),
            args.trace_id,
            args.span_id,
            self._wake_channel,
        )

    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        """Insert one job; pending jobs NOTIFY the wake channel. No event (not a transition).

        ``connection`` may be any asyncpg connection: the statement binds JSON as text, so it
        does not depend on the connection's codecs, and it commits with the caller.
        """
        params = self._enqueue_params(args)
        executor: Any = self._pool if connection is None else connection
        try:
            record = await executor.fetchrow(self._queries["enqueue"], *params)
        except asyncpg.UniqueViolationError as exc:
            raise ValueError(f"a job with id {params[0]} already exists") from exc
        return _job_from_text_json(record)

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        """COPY the batch in, as ``enqueue_batch_fast`` does, and return its rows in item order.

        Every column of a new row is known without reading it back: the item, the database
        clock read in the same transaction, and the schema defaults (no trigger writes to
        ``jobs``). So the rows are built from what was sent, the JSON columns decoded from the
        very text the COPY carried (as the in-memory backend does).
        """
        if not args_list:
            return []
        rows: list[JobRow] = []
        await self._copy(args_list, connection, rows)
        return rows

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        """Binary COPY of the jobs (no RETURNING) with one NOTIFY; returns the count.

        The rows are encoded by ``bulk`` (no connection codec involved), so TaskQ's own
        connections and a caller's take the same path.
        """
        if not args_list:
            return 0
        await self._copy(args_list, connection)
        return len(args_list)

    async def _copy(
        self, args_list: Sequence[EnqueueArgs], connection: Any, rows: list[JobRow] | None = None
    ) -> None:
        """COPY the batch in one transaction; with ``rows``, append the new rows in order."""
        batch = _CopyBatch(args_list, rows)
        if connection is None:
            async with self._pool.acquire() as conn:
                await self._copy_in(conn, batch)
        else:
            await self._copy_in(connection, batch)

    async def _copy_in(self, conn: Any, batch: _CopyBatch) -> None:
        async with conn.transaction():
            # Delays and deadlines resolve on the database clock (the arbiter's time).
            now: datetime = await conn.fetchval(self._queries["copy_clock"])
            try:
                await conn.copy_to_table(
                    "jobs",
                    source=batch.stream(now),
                    columns=bulk.COLUMNS,
                    schema_name=self.schema,
                    format="binary",
                )
            except asyncpg.UniqueViolationError as exc:
                raise ValueError(f"a job id of this batch already exists: {exc.detail}") from exc
            if batch.error is not None:
                raise batch.error  # an invalid item: the transaction rolls back
            if batch.wake:  # COPY cannot notify; delivered only if this transaction commits
                await conn.execute(self._queries["copy_wake"], self._wake_channel)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A pool connection inside a transaction; pass it as ``connection=``."""
        async with self._pool.acquire() as conn:
            try:
                async with conn.transaction():
                    yield conn
            finally:
                await _reset_lent(conn)

    # --- dispatch ----------------------------------------------------------------------------
    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        """Claim up to ``limit`` due pending jobs in one statement (see ``sql/dispatch.sql``).

        The lighter ``dispatch_plain`` runs first while no cap or round_robin queue is
        configured; when it finds that it does not apply, ``dispatch_batch`` runs instead,
        and alone for the next few seconds.
        """
        if limit <= 0 or not queues:
            return []
        args = (list(queues), limit, worker_id, lock_lease, self._oversample)
        if self._plain_dispatch and time.monotonic() >= self._plain_retry_at:
            records = await self._dispatch_pool.fetch(self._queries["dispatch_plain"], *args)
            if records[0]["plain"]:
                return [_job(record) for record in records if record["id"] is not None]
            # Caps or round_robin queues are configured: the general statement, for a while
            # (which statement runs first is all this decides; each reads the config itself).
            self._plain_retry_at = time.monotonic() + _PLAIN_RETRY_SECONDS
        records = await self._dispatch_pool.fetch(self._queries["dispatch_batch"], *args)
        return [_job(record) for record in records]

    async def release_leases(
        self,
        worker_id: UUID,
        leases: Sequence[Lease],
        *,
        reason: str,
        retry_delay: timedelta = timedelta(0),
        error: ErrorInfo | None = None,
    ) -> int:
        """Give back held jobs: unstarted ones to pending (attempt given back), started ones
        through a crashed attempt; a requested cancel ends them cancelled."""
        if not leases:
            return 0
        error = error or ErrorInfo("WorkerReleased", f"the worker gave the job back ({reason})")
        record = await self._one(
            self._queries["release_leases"],
            worker_id,
            [lease.job_id for lease in leases],
            [lease.attempt for lease in leases],
            retry_delay,
            error.error_class,
            error.message,
            reason,
            self._wake_channel,
        )
        return int(record["released"])

    # --- heartbeat ---------------------------------------------------------------------------
    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        """Worker row, the named leases, reservation leases, leader row and cancel flags: one
        statement, hence one transaction."""
        records = await self._heartbeat_pool.fetch(
            self._queries["heartbeat"],
            worker_id,
            lock_lease,
            is_leader,
            [lease.job_id for lease in leases],
            [lease.attempt for lease in leases],
        )
        flags = [
            CancelFlag(r["job_id"], r["cancel_phase"], r["cancel_requested_at"], r["cancel_reason"])
            for r in records
            if r["cancel_requested_at"] is not None
        ]
        return HeartbeatResult(
            held=frozenset(r["job_id"] for r in records),
            extended=frozenset(r["job_id"] for r in records if r["extended"]),
            cancel_flags=flags,
        )

    # --- terminal and rescheduling writes ----------------------------------------------------
    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
        """started_at for claimed jobs whose bodies began; the ids written."""
        if not starts:
            return set()
        rows = await self._pool.fetch(
            self._queries["mark_started_many"],
            worker_id,
            [s.job_id for s in starts],
            [s.attempt for s in starts],
            [s.ran_for for s in starts],
        )
        return {row["id"] for row in rows}

    async def mark_succeeded(
        self,
        lease: Lease,
        result: Any,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """running -> succeeded with its attempt and event; False when not ours any more.

        A flush of one: one copy of the completion SQL (it also wakes a waiting worker when
        the job frees room under a cap).
        """
        encoded = None if result is None else _dumps(result)
        success = Success(lease.job_id, lease.attempt, encoded, fallback_result_ttl, ran_for)
        return bool(await self.mark_succeeded_many(lease.worker_id, [success]))

    def _success_args(self, worker_id: UUID, successes: Sequence[Success]) -> tuple[Any, ...]:
        return (
            worker_id,
            [s.job_id for s in successes],
            [s.attempt for s in successes],
            [s.result_json for s in successes],
            [s.fallback_result_ttl for s in successes],
            [s.ran_for for s in successes],
            self._wake_channel,
        )

    async def _write_successes(
        self, conn: Any, worker_id: UUID, successes: Sequence[Success]
    ) -> list[asyncpg.Record]:
        """Run ``mark_succeeded_many`` on ``conn``. Result text jsonb refuses (not JSON, NaN,
        Infinity, a \\u0000 escape) fails the one statement, so nothing is written: the
        caller sees UnstorableValueError, as from the memory backend."""
        try:
            rows: list[asyncpg.Record] = await conn.fetch(
                self._queries["mark_succeeded_many"], *self._success_args(worker_id, successes)
            )
        except (
            asyncpg.InvalidTextRepresentationError,
            asyncpg.UntranslatableCharacterError,
        ) as exc:
            # The only text cast of the statement is the results' ``::jsonb``.
            reason = str(exc).splitlines()[0]
            raise jsontext.UnstorableValueError(f"not storable as JSON: {reason}") from exc
        return rows

    async def mark_succeeded_many(self, worker_id: UUID, successes: Sequence[Success]) -> set[UUID]:
        """Many completions in one statement; the ids whose leases this worker still held."""
        if not successes:
            return set()
        rows = await self._write_successes(self._pool, worker_id, successes)
        return {row["id"] for row in rows}

    async def mark_succeeded_with_conn(
        self,
        connection: Any,
        lease: Lease,
        result_json: str | None,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        """The completion inside the caller's transaction on ``connection``."""
        success = Success(lease.job_id, lease.attempt, result_json, fallback_result_ttl, ran_for)
        return bool(await self._write_successes(connection, lease.worker_id, [success]))

    async def mark_failed_or_retry(
        self,
        lease: Lease,
        error: ErrorInfo,
        retry_delay: timedelta | None,
        *,
        ran_for: float | None = None,
    ) -> JobRow | None:
        """-> failed, scheduled at now() + delay, or cancelled (deadline decided by the
        database)."""
        record = await self._pool.fetchrow(
            self._queries["mark_failed_or_retry"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            error.error_class,
            error.message,
            error.traceback,
            retry_delay,
            ran_for,
        )
        return None if record is None else _job(record)

    async def mark_cancelled(self, lease: Lease, *, ran_for: float | None = None) -> bool:
        """running -> cancelled (cooperative exit)."""
        done = await self._pool.fetchval(
            self._queries["mark_cancelled"], lease.job_id, lease.worker_id, lease.attempt, ran_for
        )
        return bool(done)

    async def write_cancel_escalation(self, lease: Lease, *, reason: str = "requested") -> bool:
        """cancel_phase -> 2 with an event, before the worker cancels the task."""
        done = await self._pool.fetchval(
            self._queries["write_cancel_escalation"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            reason,
        )
        return bool(done)

    async def mark_abandoned(self, lease: Lease, reason: str) -> bool:
        """running with cancel_phase 2 -> abandoned, ``reason`` as its error message."""
        done = await self._pool.fetchval(
            self._queries["mark_abandoned"], lease.job_id, lease.worker_id, lease.attempt, reason
        )
        return bool(done)

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        """-> scheduled without consuming the attempt, failed past the deadline, or
        cancelled."""
        status = await self._pool.fetchval(
            self._queries["mark_snoozed"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            delay,
            ran_for,
        )
        if status is None:
            return "noop"
        return cast(SnoozeOutcome, status)

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
    ) -> RetryAfterOutcome:
        """-> scheduled at now() + delay, cancelled, or failed (deadline first, then the
        attempt budget)."""
        outcome = await self._pool.fetchval(
            self._queries["mark_retry_after"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            delay,
            consume_budget,
            ran_for,
        )
        return cast(RetryAfterOutcome, "noop" if outcome is None else outcome)

    # --- history -----------------------------------------------------------------------------
    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """Every attempt of a job, oldest first."""
        return [_attempt(r) for r in await self._pool.fetch(self._queries["get_attempts"], job_id)]

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        """Every event of a job, oldest first."""
        return [_event(r) for r in await self._pool.fetch(self._queries["get_events"], job_id)]

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        """Reclaim events after the cursor, oldest first, once past the visibility delay."""
        if limit <= 0:
            return []
        if visibility_delay is None:
            visibility_delay = timedelta(seconds=RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS)
        records = await self._pool.fetch(
            self._queries["poll_reclaim_events"], after_id, limit, visibility_delay
        )
        return [_event(r) for r in records]

    # --- cancel ------------------------------------------------------------------------------
    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """Cancel at once when waiting; flag (phase 1) and NOTIFY when running."""
        record = await self._one(
            self._queries["cancel_where"], None, None, None, [job_id], None, reason,
            self._events_channel,
        )  # fmt: skip
        if record["cancelled"]:
            return "cancelled"
        if record["requested"]:
            return "requested"
        job = await self.get(job_id)  # nothing changed: say why
        if job is None:
            return "not_found"
        return "already_requested" if job.status is JobStatus.RUNNING else "terminal"

    async def cancel_where(self, filter: JobFilter, reason: str | None) -> BulkCancelResult:
        """``write_cancel_request`` for the newest ``filter.limit`` matching active jobs."""
        record = await self._one(
            self._queries["cancel_where"], *_filter_args(filter), reason, self._events_channel
        )
        return BulkCancelResult(cancelled=record["cancelled"], requested=record["requested"])

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        """Running jobs of this worker with a cancel requested, oldest request first."""
        records = await self._heartbeat_pool.fetch(self._queries["poll_cancel_flags"], worker_id)
        return [
            CancelFlag(r["job_id"], r["cancel_phase"], r["cancel_requested_at"], r["cancel_reason"])
            for r in records
        ]

    # --- admin -------------------------------------------------------------------------------
    async def retry_job(self, job_id: UUID) -> bool:
        """failed/crashed/cancelled -> pending with a fresh attempt budget."""
        record = await self._one(
            self._queries["retry_jobs"], None, None, None, [job_id], None, self._wake_channel
        )
        return bool(record["retried"])

    async def retry_where(self, filter: JobFilter) -> int:
        """``retry_job`` for the newest ``filter.limit`` matching retryable jobs."""
        record = await self._one(
            self._queries["retry_jobs"], *_filter_args(filter), self._wake_channel
        )
        return int(record["retried"])

    # --- sweeps ------------------------------------------------------------------------------
    async def scheduled_to_pending(self) -> int:
        """Due scheduled jobs -> pending; one NOTIFY when any moved."""
        record = await self._one(self._queries["scheduled_to_pending"], self._wake_channel)
        return int(record["moved"])

    async def deadline_sweep(self) -> int:
        """Waiting jobs past schedule_to_close -> failed (DeadlineExceeded)."""
        return int(await self._pool.fetchval(self._queries["deadline_sweep"]))

    async def reclaim_expired_locks(self, cancel_grace: timedelta, cleanup_grace: timedelta) -> int:
        """Sweep 1: expired leases -> pending / crashed / cancelled, with outbox events."""
        record = await self._one(
            self._queries["reclaim_expired_locks"],
            cancel_grace,
            cleanup_grace,
            self._wake_channel,
            UNSTARTED_RECLAIM_LIMIT,
        )
        return int(record["reclaimed"])

    async def expire_results(self) -> int:
        """Clear results whose result_expires_at has passed."""
        return int(await self._pool.fetchval(self._queries["expire_results"]))

    # --- reads -------------------------------------------------------------------------------
    async def get(self, job_id: UUID) -> JobRow | None:
        """One job, or None."""
        record = await self._pool.fetchrow(self._queries["get_job"], job_id)
        return None if record is None else _job(record)

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, newest first."""
        records = await self._fetch_custom_plan("list_jobs", *_filter_args(filter))
        return [_job(r) for r in records]

    async def _fetch_custom_plan(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run an operator query planned for its actual arguments.

        The pool plans generically (right for the hot path); a filter query's best index
        depends on which filters are set, and its generic plan scans the whole table.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(self._queries["use_custom_plans"])
            return list(await conn.fetch(self._queries[name], *args))

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        """Job counts per (queue, status)."""
        records = await self._pool.fetch(self._queries["count_by_queue_status"])
        return [QueueStatusCount(r["queue"], JobStatus(r["status"]), r["count"]) for r in records]

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        """Whether any pending, scheduled or running job is in these queues."""
        return bool(await self._pool.fetchval(self._queries["has_active_jobs"], list(queues)))

    async def count_active_jobs(self, queues: Sequence[str]) -> int:
        """Pending + scheduled + running jobs in these queues."""
        return int(await self._pool.fetchval(self._queries["count_active_jobs"], list(queues)))

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        """Pending + scheduled jobs per actor; actors with none are left out."""
        records = await self._pool.fetch(self._queries["count_pending_jobs"], list(actors))
        return {r["actor"]: r["count"] for r in records}

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        """Stored max_pending per actor that has an actor_config row."""
        records = await self._pool.fetch(self._queries["get_actor_max_pending"])
        return {r["actor"]: r["max_pending"] for r in records}

    async def count_jobs(self, filter: JobFilter) -> int:
        """How many jobs the filter matches (at most ``filter.limit``)."""
        records = await self._fetch_custom_plan("count_jobs", *_filter_args(filter))
        return int(records[0]["count"])

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        """The job's place in its queue's dispatch order, on the database clock."""
        record = await self._pool.fetchrow(self._queries["get_dispatch_position"], job_id)
        if record is None:
            return None
        return DispatchPosition(
            now=record["now"],
            mode=record["mode"],
            ahead=int(record["ahead"]),
            ahead_other_cohorts=int(record["ahead_other_cohorts"]),
        )

    # --- dashboard ---------------------------------------------------------------------------
    async def dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        """Per-queue activity for the live dashboard, every read of jobs index-backed."""
        check_dashboard_window(window, minutes)
        records = await self._pool.fetch(self._queries["dashboard_stats"], window, minutes)
        queues = [_queue_activity(r, minutes) for r in records if r["name"] is not None]
        return DashboardStats(now=records[0]["now"], window=window, queues=queues)

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, most recent activity first, each status from its index."""
        check_recent_limit(filter)
        records = await self._pool.fetch(
            self._queries["list_recent_jobs"],
            _statuses(filter),
            filter.queue,
            filter.actor,
            filter.limit,
        )
        return [_job(r) for r in records]

    # --- workers and leadership --------------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert (or refresh) this worker's row, status running."""
        await self._pool.execute(
            self._queries["register_worker"],
            info.id,
            info.hostname,
            info.pid,
            info.label,
            info.workgroup_instance,
            list(info.queues),
            list(info.actors),
            info.concurrency,
            info.version,
        )

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        """status stopped, stopped_at now."""
        await self._pool.execute(self._queries["mark_worker_stopped"], worker_id)

    async def list_workers(self) -> list[WorkerRow]:
        """Every worker row, most recently seen first."""
        return [_worker(r) for r in await self._pool.fetch(self._queries["list_workers"])]

    async def try_acquire_leadership(self, worker_id: UUID) -> bool:
        """Take (or keep) the leader's session advisory lock on the dedicated connection.

        A dead leader connection means the lock is gone: this call returns False and the
        next one reconnects and competes again. When no connection can be opened at all, it
        raises DatabaseUnavailableError (the database is away, not merely the lock).
        """
        async with self._leader_lock:
            if self._leader_worker is not None:
                if self._leader_worker != worker_id:
                    return False
                return await self._renew_leadership(worker_id)
            try:
                conn = self._leader_conn
                if conn is None or conn.is_closed():
                    conn = self._leader_conn = await self._open_direct_connection(
                        f"taskq_leader_{self.schema}"
                    )
                granted = await conn.fetchval(
                    self._queries["leader_try_acquire"],
                    self._leader_key,
                    worker_id,
                )
            except Exception as exc:
                if is_database_trouble(exc):
                    await self._drop_leader_connection()
                raise  # translated to DatabaseUnavailableError on the way out
            if granted:
                self._leader_worker = worker_id
                return True
            return False

    async def _renew_leadership(self, worker_id: UUID) -> bool:
        conn = self._leader_conn
        try:
            if conn is None or conn.is_closed():
                raise asyncpg.InterfaceError("the leader connection is closed")
            await conn.execute(self._queries["leader_renew"], worker_id)
        except Exception as exc:
            if not is_database_trouble(exc):
                raise
            _log.warning(
                "leadership_lost", schema=self.schema, worker_id=str(worker_id), error=str(exc)
            )
            self._leader_worker = None
            await self._drop_leader_connection()
            return False
        return True

    async def release_leadership(self, worker_id: UUID) -> None:
        """Unlock, remove the leader row and close the leader connection (no-op when not
        leading as ``worker_id``)."""
        async with self._leader_lock:
            if self._leader_worker != worker_id:
                return
            self._leader_worker = None
            conn = self._leader_conn
            if conn is not None and not conn.is_closed():
                try:
                    await conn.fetchrow(
                        self._queries["leader_release"],
                        self._leader_key,
                        worker_id,
                    )
                except Exception as exc:
                    if not is_database_trouble(exc):
                        raise
                    _log.warning("leader_release_failed", schema=self.schema, error=str(exc))
            await self._drop_leader_connection()

    async def _drop_leader_connection(self) -> None:
        conn, self._leader_conn = self._leader_conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=2.0)
        except Exception as exc:
            if not is_database_trouble(exc):
                raise
            conn.terminate()

    async def get_leader(self) -> LeaderRow | None:
        """The current leader row, if any."""
        record = await self._pool.fetchrow(self._queries["get_leader"])
        if record is None:
            return None
        return LeaderRow(record["worker_id"], record["elected_at"], record["last_seen_at"])

    # --- actor config ------------------------------------------------------------------------
    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        """Create missing rows; report capacity overrides and structural drift; overwrite the
        drift only with ``force``. One statement, so one transaction."""
        if not declared:
            return ActorConfigSyncResult([], [], [], overwritten=False)
        metadata = [json.loads(_dumps(d.metadata)) for d in declared]  # jsonb-normalized
        records = await self._pool.fetch(
            self._queries["sync_actor_configs"],
            [d.actor for d in declared],
            [d.queue for d in declared],
            [_dumps(m) for m in metadata],
            [d.max_concurrent for d in declared],
            [d.max_pending for d in declared],
            [d.result_ttl for d in declared],
            force,
        )
        created: list[str] = []
        overrides: list[tuple[str, str, Any, Any]] = []
        drift: list[ActorConfigDrift] = []
        for decl, wanted_metadata, record in zip(declared, metadata, records, strict=True):
            if record["created"]:
                if decl.actor not in created:
                    created.append(decl.actor)
                continue
            if not record["existed"]:
                continue  # created concurrently by another worker: nothing of ours to compare
            for name in _CAPACITY_FIELDS:
                stored, wanted = record[f"stored_{name}"], getattr(decl, name)
                if stored != wanted:
                    overrides.append((decl.actor, name, stored, wanted))
            if record["stored_queue"] != decl.queue:
                drift.append(
                    ActorConfigDrift(decl.actor, "queue", record["stored_queue"], decl.queue)
                )
            if record["stored_metadata"] != wanted_metadata:
                drift.append(
                    ActorConfigDrift(
                        decl.actor, "metadata", record["stored_metadata"], wanted_metadata
                    )
                )
        return ActorConfigSyncResult(created, overrides, drift, overwritten=force and bool(drift))

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        """Every actor_config row by name."""
        records = await self._pool.fetch(self._queries["list_actor_configs"])
        return [_actor_config(r) for r in records]

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        """One actor_config row, or None."""
        record = await self._pool.fetchrow(self._queries["get_actor_config"], actor)
        return None if record is None else _actor_config(record)

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
    ) -> ActorConfigRow | None:
        """Set (value) or clear (None) capacity fields; UNSET leaves a field. None if no row."""
        for name, value in (("max_concurrent", max_concurrent), ("max_pending", max_pending)):
            if value is not UNSET and value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        record = await self._pool.fetchrow(
            self._queries["update_actor_config"],
            actor,
            max_concurrent is not UNSET,
            None if max_concurrent is UNSET else max_concurrent,
            max_pending is not UNSET,
            None if max_pending is UNSET else max_pending,
            result_ttl is not UNSET,
            None if result_ttl is UNSET else result_ttl,
            self._wake_channel,
        )
        return None if record is None else _actor_config(record)

    # --- queues ------------------------------------------------------------------------------
    async def list_queues(self) -> list[QueueRow]:
        """Every queue that has jobs or a row, by name."""
        return [_queue(r) for r in await self._pool.fetch(self._queries["list_queues"], None)]

    async def get_queue(self, name: str) -> QueueRow | None:
        """One queue, or None when it has neither jobs nor a row."""
        record = await self._pool.fetchrow(self._queries["list_queues"], name)
        return None if record is None else _queue(record)

    async def update_queue(
        self,
        name: str,
        *,
        mode: QueueMode = UNSET,
        max_concurrent: int | None = UNSET,
        paused: bool = UNSET,
    ) -> QueueRow:
        """Upsert a queue row; UNSET leaves a field; ``max_concurrent=None`` clears it."""
        if mode is not UNSET and mode not in _QUEUE_MODES:
            raise ValueError(f"unknown queue mode {mode!r} (valid: round_robin, strict_fifo)")
        if max_concurrent is not UNSET and max_concurrent is not None and max_concurrent < 0:
            raise ValueError(f"max_concurrent must not be negative, got {max_concurrent}")
        record = await self._one(
            self._queries["update_queue"],
            name,
            mode is not UNSET,
            None if mode is UNSET else mode,
            max_concurrent is not UNSET,
            None if max_concurrent is UNSET else max_concurrent,
            paused is not UNSET,
            None if paused is UNSET else bool(paused),
            self._wake_channel,
        )
        return _queue(record)

    # --- wake-ups ----------------------------------------------------------------------------
    def subscribe_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever new dispatchable work may exist (wake NOTIFY)."""
        return self.listener.subscribe_wake()

    def subscribe_cancel_wake(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An Event set whenever a cancel request is written (events NOTIFY)."""
        return self.listener.subscribe_cancel_wake()


if TYPE_CHECKING:

    def _satisfies_protocol(backend: PostgresBackend) -> Backend:
        return backend  # mypy checks every signature against the protocol here
