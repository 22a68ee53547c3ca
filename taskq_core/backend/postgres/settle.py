"""Settling leases: success, failure, retry, snooze, retry-after, cancel, abandon, release."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast
from uuid import UUID

import asyncpg

from taskq_core import jsontext
from taskq_core.backend.protocol import (
    ErrorInfo,
    JobRow,
    Lease,
    RetryAfterOutcome,
    SnoozeOutcome,
    Success,
)

from . import bulk, rows
from .core import BackendCore


class SettlePart(BackendCore):
    """Every write that ends or reschedules a claimed attempt, fenced by its lease."""

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
        encoded = None if result is None else bulk.dumps(result)
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
        return None if record is None else rows.job(record)

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
