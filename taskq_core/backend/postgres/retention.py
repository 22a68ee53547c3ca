"""Retention on PostgreSQL: the prune to the archive, the archive expiry,
their cluster-wide locks and reads of archived jobs. Every batch is one statement committed
on its own (sql/retention.sql); the archive's time partitions are made and dropped by
archive_partitions.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import TypeVar
from uuid import UUID

import asyncpg
import structlog
from asyncpg.pool import PoolConnectionProxy

from taskq_core.backend.protocol import AttemptRow
from taskq_core.backend.protocol.retention import ArchivedJob, PrunePolicy, PruneResult
from taskq_core.constants import validate_identifier
from taskq_core.statemachine import JobStatus

from . import archive_partitions, rows
from .core import BackendCore
from .errors import translate

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")
T = TypeVar("T")


def sweep_lock_key(schema: str, name: str) -> str:
    """The advisory-lock key of sweep lock ``name`` in ``schema``: ``taskq:prune`` becomes
    ``taskq:prune:<schema>``, so two schemas on one server never share a sweep lock."""
    return f"{name}:{validate_identifier(schema)}"


def _rules(policy: PrunePolicy) -> tuple[list[str], list[timedelta], str | None]:
    """The policy as the statements' parameters: statuses and retentions as parallel arrays."""
    statuses = list(policy.retention)
    return [s.value for s in statuses], [policy.retention[s] for s in statuses], policy.queue


def _add_counts(moved: dict[tuple[JobStatus, str], int], records: Iterable[asyncpg.Record]) -> int:
    """Add one statement's (status, queue, count) rows into ``moved``; return their sum."""
    total = 0
    for record in records:
        key = (JobStatus(record["status"]), record["queue"])
        moved[key] = moved.get(key, 0) + record["count"]
        total += record["count"]
    return total


async def _translating(pending: Awaitable[T]) -> T:
    """Await ``pending``, turning database trouble into TaskQ's errors (the class decorator
    only wraps coroutine methods, not a context manager)."""
    try:
        return await pending
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc


# Mirrors memory/retention.py on purpose: both implement protocol.retention, so each method restates
# its signature (mypy checks the match).
class RetentionPart(BackendCore):
    """The prune, the archive expiry and the archived reads."""

    async def prune_jobs(
        self,
        policy: PrunePolicy,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> PruneResult:
        # ``policy.batch_size`` per committed batch; ``dry_run`` counts in one query instead.
        moved: dict[tuple[JobStatus, str], int] = {}
        statuses, keeps, queue = _rules(policy)
        if dry_run:
            records = await self._pool.fetch(
                self._queries["prune_jobs_count"], statuses, keeps, queue
            )
            _add_counts(moved, records)
            return PruneResult(moved, 0)
        await archive_partitions.ensure_ahead(self._pool, self._queries, policy.archive_for)
        batches = 0
        while True:
            # Each fetch outside a transaction block commits on its own: one batch, one commit.
            records = await self._pool.fetch(
                self._queries["prune_jobs_batch"],
                statuses,
                keeps,
                queue,
                policy.batch_size,
                policy.archive_for,
            )
            batches += 1
            count = _add_counts(moved, records)
            if on_batch is not None:
                on_batch(count)
            if count < policy.batch_size:
                return PruneResult(moved, batches)

    async def expire_archive(
        self, batch_size: int, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        # Ended ranges dropped whole, then the default partition's rows of ended days,
        # ``batch_size`` per committed batch.
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        dropped = await archive_partitions.drop_ended(self._pool, self._queries, on_batch)
        deleted = await self._in_batches("expire_archive_batch", batch_size, on_batch=on_batch)
        return dropped + deleted

    def sweep_lock(self, name: str) -> AbstractAsyncContextManager[bool]:
        # A session advisory lock per schema on one direct connection kept for the body (never
        # through PgBouncer, whose transaction mode would hand the session to another client).
        return self._sweep_lock(sweep_lock_key(self.schema, name))

    @asynccontextmanager
    async def _sweep_lock(self, key: str) -> AsyncIterator[bool]:
        conn = await _translating(self._session_pool.acquire())
        held: bool | None = None  # None: the try got no answer, the session may hold the lock
        try:
            held = bool(await _translating(conn.fetchval(self._queries["sweep_lock_try"], key)))
            yield held
        finally:
            await self._end_sweep_lock(conn, key, held)

    async def _end_sweep_lock(self, conn: PoolConnectionProxy, key: str, held: bool | None) -> None:
        """Unlock and give the connection back. The pool does not reset sessions, so a
        connection that may still hold the lock (the try or the unlock got no answer: a
        broken connection, a cancellation) is closed instead: its lock ends with its session,
        and it never goes back to the pool locked. A failed unlock is logged, not raised: it
        must not hide what ended the body."""
        clean = held is False
        try:
            if held:
                clean = bool(await conn.fetchval(self._queries["sweep_lock_release"], key))
        except Exception as exc:
            _log.warning("sweep_unlock_failed", schema=self.schema, key=key, error=str(exc))
        finally:
            if not clean:
                # A connection found dead is already detached from its proxy (the pool drops
                # it): terminating it then raises InterfaceError, and there is nothing to end.
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            await self._session_pool.release(conn)

    async def get_archived_job(self, job_id: UUID) -> ArchivedJob | None:
        # Its row built as a live job's.
        record = await self._pool.fetchrow(self._queries["get_archived_job"], job_id)
        if record is None:
            return None
        return ArchivedJob(rows.job(record), record["archived_at"], record["expire_at"])

    async def get_archived_attempts(self, job_id: UUID) -> list[AttemptRow]:
        records = await self._pool.fetch(self._queries["get_archived_attempts"], job_id)
        return [rows.attempt(r) for r in records]
