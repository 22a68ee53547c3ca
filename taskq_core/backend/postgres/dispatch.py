"""Dispatch and lease upkeep: claiming jobs, the heartbeat, start marks, cancel flags."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from taskq_core.backend.protocol import (
    CancelFlag,
    HeartbeatResult,
    JobRow,
    Lease,
    LostAttempt,
    Start,
)

from . import rows
from .core import BackendCore

# How long dispatch skips `dispatch_plain` once it found caps or round_robin queues.
_PLAIN_RETRY_SECONDS = 5.0


# Mirrors memory/dispatch.py on purpose: both implement protocol.worker, so each method restates its
# signature (mypy checks the match).
class DispatchPart(BackendCore):
    """Claim jobs, keep their leases, record their starts."""

    async def dispatch_batch(
        self, worker_id: UUID, queues: Sequence[str], limit: int, lock_lease: timedelta
    ) -> list[JobRow]:
        # One statement (sql/dispatch.sql). The lighter ``dispatch_plain`` runs first while no
        # cap or round_robin queue is configured; when it finds that it does not apply,
        # ``dispatch_batch`` runs instead, and alone for the next few seconds.
        if limit <= 0 or not queues:
            return []
        args = (list(queues), limit, worker_id, lock_lease, self._oversample)
        if self._plain_dispatch and time.monotonic() >= self._plain_retry_at:
            records = await self._dispatch_pool.fetch(self._queries["dispatch_plain"], *args)
            if records[0]["plain"]:
                return [rows.job(record) for record in records if record["id"] is not None]
            # Caps or round_robin queues are configured: the general statement, for a while
            # (which statement runs first is all this decides; each reads the config itself).
            self._plain_retry_at = time.monotonic() + _PLAIN_RETRY_SECONDS
        records = await self._dispatch_pool.fetch(self._queries["dispatch_batch"], *args)
        return [rows.job(record) for record in records]

    # --- heartbeat ---------------------------------------------------------------------------
    async def heartbeat(
        self,
        worker_id: UUID,
        lock_lease: timedelta,
        leases: Sequence[Lease] = (),
        *,
        is_leader: bool = False,
    ) -> HeartbeatResult:
        # One statement.
        records = await self._heartbeat_pool.fetch(
            self._queries["heartbeat"],
            worker_id,
            lock_lease,
            is_leader,
            [lease.job_id for lease in leases],
            [lease.attempt for lease in leases],
        )
        registered = bool(records[0]["registered"])  # the statement always answers a row
        records = [r for r in records if r["job_id"] is not None]
        flags = [rows.cancel_flag(r) for r in records if r["cancel_requested_at"] is not None]
        return HeartbeatResult(
            held=frozenset(r["job_id"] for r in records),
            extended=frozenset(r["job_id"] for r in records if r["extended"]),
            cancel_flags=flags,
            registered=registered,
        )

    # --- terminal and rescheduling writes ----------------------------------------------------
    async def mark_started_many(self, worker_id: UUID, starts: Sequence[Start]) -> set[UUID]:
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

    async def record_lost_attempts(self, worker_id: UUID, lost: Sequence[LostAttempt]) -> int:
        if not lost:
            return 0
        return int(
            await self._pool.fetchval(
                # One array per column, as settle.py's _settle_successes passes its successes:
                # alike by shape, other columns.
                self._queries["record_lost_attempts"],
                worker_id,
                [a.job_id for a in lost],
                [a.attempt for a in lost],
                [a.started_ago for a in lost],
                [a.ended_ago for a in lost],
                [a.reason for a in lost],
            )
        )

    async def poll_cancel_flags(self, worker_id: UUID) -> list[CancelFlag]:
        records = await self._heartbeat_pool.fetch(self._queries["poll_cancel_flags"], worker_id)
        return [rows.cancel_flag(r) for r in records]

    async def write_cancel_escalation(self, lease: Lease, *, reason: str = "requested") -> bool:
        done = await self._pool.fetchval(
            self._queries["write_cancel_escalation"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            reason,
        )
        return bool(done)
