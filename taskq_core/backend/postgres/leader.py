"""Leader election (a session advisory lock on a dedicated connection that the server ends
after a lease without a statement) and the sweeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

import asyncpg
import structlog

from taskq_core.backend.protocol import (
    EventRow,
    LeaderRow,
    derived,
)
from taskq_core.constants import (
    CANCEL_RECLAIM_HEADROOM,
    DEFAULT_POISON_RECLAIMS,
    JOBS_VACUUM_TIMEOUT,
    validate_identifier,
)

from . import rows
from .core import BackendCore
from .errors import is_database_trouble
from .settle import Settlement, settle_rows

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")


# Mirrors memory/leader.py on purpose: both implement protocol.leader, so each method restates its
# signature (mypy checks the match).
class LeaderPart(BackendCore):
    """The maintenance leader's lock and row, and the sweeps it runs."""

    async def try_acquire_leadership(
        self, worker_id: UUID, *, lease: timedelta | None = None
    ) -> bool:
        # The lock: a session advisory lock on the dedicated connection, whose
        # ``idle_session_timeout`` is ``lease``. A renewal that finds the connection dead (the
        # server ended a silent session, a restart, a terminated backend) has lost the lock with
        # it: this call then competes again at once on a new connection, so it answers False
        # only when the database did, and raises DatabaseUnavailableError when the database
        # cannot be reached.
        async with self._leader_lock:
            if self._leader_worker is not None:
                if self._leader_worker != worker_id:
                    return False
                if await self._renew_leadership(worker_id, lease):
                    return True
            return await self._compete(worker_id, lease)

    async def _compete(self, worker_id: UUID, lease: timedelta | None) -> bool:
        conn = self._leader_conn
        if conn is not None and not conn.is_closed():
            try:
                return await self._take_lock(conn, worker_id, lease)
            except Exception as exc:
                if not is_database_trouble(exc):
                    raise
                # The server ends a session idle for a lease (a worker that did not campaign
                # that long: it was frozen too), and the client may not have seen it yet. The
                # database is away only if a new connection fails as well.
                await self._drop_leader_connection()
        try:
            conn = self._leader_conn = await self._open_direct_connection(
                f"taskq_leader_{self.schema}"
            )
            self._leader_session_lease = None
            return await self._take_lock(conn, worker_id, lease)
        except Exception as exc:
            if is_database_trouble(exc):
                await self._drop_leader_connection()
            raise  # translated to DatabaseUnavailableError on the way out

    async def _take_lock(
        self, conn: asyncpg.Connection, worker_id: UUID, lease: timedelta | None
    ) -> bool:
        await self._apply_session_lease(conn, lease)
        granted = await conn.fetchval(
            self._queries["leader_try_acquire"],
            self._leader_key,
            worker_id,
        )
        if granted:
            self._leader_worker = worker_id
        return bool(granted)

    async def _apply_session_lease(self, conn: asyncpg.Connection, lease: timedelta | None) -> None:
        """Make the server end this session after ``lease`` without a statement (see
        ``leader_session_lease``), once per connection and lease; a server that refuses the
        setting is logged once and the lock then lasts as long as the session."""
        if lease == self._leader_session_lease:
            return
        milliseconds = 0 if lease is None else max(1, round(lease.total_seconds() * 1000))
        try:
            await conn.execute(self._queries["leader_session_lease"], str(milliseconds))
        except asyncpg.PostgresError as exc:
            if is_database_trouble(exc):
                raise
            if not self._leader_lease_refused:
                _log.warning(
                    "leader_lease_unenforced",
                    schema=self.schema,
                    error=str(exc),
                    note="a frozen leader keeps its lock until its session ends "
                    "(idle_session_timeout needs PostgreSQL 14 or later)",
                )
            self._leader_lease_refused = True
        self._leader_session_lease = lease

    async def _renew_leadership(self, worker_id: UUID, lease: timedelta | None) -> bool:
        """Renew on the open leader connection; False (logged, the connection dropped) when
        it is dead, which takes the lock with it."""
        conn = self._leader_conn
        try:
            if conn is None or conn.is_closed():
                raise asyncpg.InterfaceError("the leader connection is closed")
            await self._apply_session_lease(conn, lease)
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
        # Unlock, remove the leader row and close the leader connection.
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

    # Closes as notify.py's NotifyListener._discard_connection does, kept apart on purpose: here
    # only database trouble falls back to terminate (anything else propagates), there a cancel too.
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
        record = await self._pool.fetchrow(self._queries["get_leader"])
        if record is None:
            return None
        return LeaderRow(record["worker_id"], record["elected_at"], record["last_seen_at"])

    # --- sweeps ------------------------------------------------------------------------------
    async def get_next_due_in(self) -> float | None:
        value = await self._pool.fetchval(self._queries["get_next_due_in"])
        return None if value is None else max(float(value), 0.0)

    async def promote_scheduled_jobs(self) -> int:
        # One NOTIFY when any moved.
        record = await self._one(self._queries["promote_scheduled_jobs"], self._wake_channel)
        return int(record["moved"])

    async def fail_overdue_jobs(self) -> int:
        return int(await self._pool.fetchval(self._queries["fail_overdue_jobs"]))

    async def reclaim_expired_leases(
        self,
        cancel_grace: timedelta,
        cleanup_grace: timedelta,
        *,
        poison_reclaims: int | None = DEFAULT_POISON_RECLAIMS,
    ) -> int:
        # The expired leases are locked (SKIP LOCKED) and settled (outcome reclaimed) in one
        # transaction: ``settle`` decides each row's fate, as it does for a worker's release.
        async with self._pool.acquire() as conn, conn.transaction():
            expired = await conn.fetch(
                self._queries["expired_leases"],
                cancel_grace,
                cleanup_grace,
                CANCEL_RECLAIM_HEADROOM,
            )
            if not expired:
                return 0
            settlements = [
                Settlement(
                    record["id"],
                    record["attempt"],
                    record["locked_by_worker"],
                    "reclaimed",
                    error_class="WorkerCrashed",
                    error_message="the worker's lock expired without a terminal write",
                    blamed=record["blamed"],
                )
                for record in expired
            ]
            settled = await settle_rows(self, conn, settlements, poison_reclaims=poison_reclaims)
            return len(settled)

    async def expire_results(
        self, batch_size: int = 10_000, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        # ``batch_size`` per committed batch.
        return await self._in_batches("expire_results", batch_size, on_batch=on_batch)

    async def delete_stale_workers(self, older_than: timedelta, batch_size: int = 1_000) -> int:
        # ``batch_size`` per committed batch (why that is safe: sql/maintenance.sql).
        derived.check_stale_age(older_than)
        return await self._in_batches("delete_stale_workers", batch_size, older_than)

    async def vacuum_jobs(self, min_dead: int, dead_fraction: float) -> bool:
        # VACUUM cannot run in a transaction block, so it is a statement of its own.
        due = await self._pool.fetchval(
            self._queries["jobs_vacuum_due"], f"{self.schema}.jobs", min_dead, dead_fraction
        )
        if not due:
            return False
        await self._pool.execute(
            f"VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) {validate_identifier(self.schema)}.jobs",
            timeout=JOBS_VACUUM_TIMEOUT,
        )
        return True

    async def list_waiting_queues(self) -> list[str]:
        # A skip scan of the pending dispatch index; sorted in Python, not by a collation.
        records = await self._pool.fetch(self._queries["list_waiting_queues"])
        return sorted(record["queue"] for record in records)  # Python's order, not a collation

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        if limit <= 0:
            return []
        visibility_delay = derived.reclaim_visibility_delay(visibility_delay)
        records = await self._pool.fetch(
            self._queries["poll_reclaim_events"], after_id, limit, visibility_delay
        )
        return [rows.event(r) for r in records]

    async def get_latest_reclaim_event_id(self) -> int:
        return int(await self._pool.fetchval(self._queries["get_latest_reclaim_event_id"]))

    async def close(self) -> None:
        # Step down first (unlock, remove the leader row, close its connection), then close the
        # rest.
        if self._closed:
            return
        if self._leader_worker is not None:
            await self.release_leadership(self._leader_worker)
        await self._drop_leader_connection()
        await super().close()
