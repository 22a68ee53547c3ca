"""Settling leases: every outcome of a claimed attempt goes through the one ``settle`` statement.

Success (one or a batch, or inside the caller's transaction), failure and retry, snooze,
retry-after, cooperative cancel, abandon, a worker's release and the leader's reclaim each
become rows of ``sql/settle.sql``, which holds the rules (cancel wins, deadline, retries
left, give-backs) and writes the job, its attempt row and its event row in one statement.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Literal, cast
from uuid import UUID

import asyncpg

from taskq_core import jsontext

# Names memory/settle.py imports too, on purpose: both implement protocol.worker.
from taskq_core.backend.protocol import (
    Denied,
    ErrorInfo,
    JobRow,
    Lease,
    RetryAfterOutcome,
    SnoozeOutcome,
    Success,
    derived,
    first_success_per_job,
)
from taskq_core.constants import DENIAL_GRID, UNSTARTED_RECLAIM_LIMIT
from taskq_core.statemachine import JobStatus

from . import rows
from .core import BackendCore

Outcome = Literal[
    "succeeded",
    "failed",
    "retry",
    "snooze",
    "retry_after",
    "cancelled",
    "interrupted",
    "abandoned",
    "released",
    "reclaimed",
]


@dataclass(frozen=True, slots=True)
class Settlement:
    """One row of a ``settle`` call: a lease, the outcome asked for and what it carries.

    Fields in the statement's parameter order ($1..$14); see ``sql/settle.sql``.
    """

    # Alike ActorConfigRow (protocol/values.py) and memory/store.py's ActorConfigRecord by shape
    # only: typed fields with None defaults, other data.
    job_id: UUID
    attempt: int
    worker_id: UUID
    outcome: Outcome
    delay: timedelta | None = None
    consume_budget: bool | None = None
    result_json: str | None = None
    fallback_result_ttl: timedelta | None = None
    ran_for: float | None = None
    error_class: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    reason: str | None = None
    blamed: bool | None = None  # a reclaim: the sweep blames the worker's death on the job

    @classmethod
    def of(cls, lease: Lease, outcome: Outcome, **carried: Any) -> Settlement:
        """The settlement of ``lease`` with ``outcome``."""
        return cls(lease.job_id, lease.attempt, lease.worker_id, outcome, **carried)


DENIAL_GRID_SECONDS = DENIAL_GRID.total_seconds()
_SETTLEMENT_FIELDS = tuple(f.name for f in fields(Settlement))


def _status(settled: str | None) -> JobStatus | None:
    """``_settle_one``'s answer (``status`` or ``status:rule error``) as the job's status."""
    return None if settled is None else JobStatus(settled.partition(":")[0])


async def settle_rows(
    core: BackendCore,
    executor: Any,
    settlements: Sequence[Settlement],
    *,
    poison_reclaims: int | None = None,
) -> list[asyncpg.Record]:
    """Run ``settle`` on ``executor`` (the pool or a connection); one record (id, status,
    rule_error) per lease that was still the row's. ``poison_reclaims``: the reclaim
    sweep's poison limit (None: a reclaim never fails a job as poison). A function of the
    core: the leader's reclaim and the operator's end of a running job settle through it."""
    columns = [[getattr(s, name) for s in settlements] for name in _SETTLEMENT_FIELDS]
    return await _unstorable_as_taskq_error(
        executor.fetch(
            core._queries["settle"],
            *columns,
            core._wake_channel,
            UNSTARTED_RECLAIM_LIMIT,
            poison_reclaims,
            core._events_channel,
            DENIAL_GRID_SECONDS,
        )
    )


async def _unstorable_as_taskq_error(
    fetch: Awaitable[list[asyncpg.Record]],
) -> list[asyncpg.Record]:
    """Await a settle. Result text jsonb refuses (not JSON, NaN, Infinity, a \\u0000
    escape: the statement's only text cast) fails the one statement, so nothing is
    written: the caller sees UnstorableValueError, as from the memory backend."""
    try:
        return await fetch
    except (
        asyncpg.InvalidTextRepresentationError,
        asyncpg.UntranslatableCharacterError,
    ) as exc:
        reason = str(exc).splitlines()[0]
        raise jsontext.UnstorableValueError(f"not storable as JSON: {reason}") from exc


# Mirrors memory/settle.py on purpose: both implement protocol.worker, so each method restates its
# signature (mypy checks the match).
class SettlePart(BackendCore):
    """Every write that ends or reschedules a claimed attempt, fenced by its lease."""

    async def _settle_one(self, lease: Lease, outcome: Outcome, **carried: Any) -> str | None:
        """Settle one lease; its new status, with ``:rule error`` when a rule failed it (None
        when the lease is not the row's any more)."""
        records = await settle_rows(self, self._pool, [Settlement.of(lease, outcome, **carried)])
        if not records:
            return None
        status, rule_error = records[0]["status"], records[0]["rule_error"]
        return status if rule_error is None else f"{status}:{rule_error}"

    # --- success: the hot path of every drain -------------------------------------------------
    async def _settle_successes(
        self, executor: Any, worker_id: UUID, successes: Sequence[Success]
    ) -> list[asyncpg.Record]:
        """``settle_succeeded`` (settle's success branch, as its own statement for speed: see
        ``sql/settle.sql``) on ``executor``; one record (id) per lease still the row's."""
        return await _unstorable_as_taskq_error(
            executor.fetch(
                # One array per column, as dispatch.py's record_lost_attempts passes its attempts:
                # alike by shape, other columns.
                self._queries["settle_succeeded"],
                worker_id,
                [s.job_id for s in successes],
                [s.attempt for s in successes],
                [s.result_json for s in successes],
                [s.fallback_result_ttl for s in successes],
                [s.ran_for for s in successes],
                self._wake_channel,
            )
        )

    mark_succeeded = derived.mark_succeeded

    async def mark_succeeded_many(self, worker_id: UUID, successes: Sequence[Success]) -> set[UUID]:
        # ``settle_succeeded``: the hot path's own statement (sql/settle.sql); ephemeral
        # successes go in ``delete_succeeded``, a second statement only when there are some.
        successes = first_success_per_job(successes)
        kept = [s for s in successes if not s.ephemeral]
        gone = [s for s in successes if s.ephemeral]
        written: set[UUID] = set()
        if kept:
            records = await self._settle_successes(self._pool, worker_id, kept)
            written.update(record["id"] for record in records)
        if gone:
            records = await self._pool.fetch(
                self._queries["delete_succeeded"],
                worker_id,
                [s.job_id for s in gone],
                [s.attempt for s in gone],
                self._wake_channel,
            )
            written.update(record["id"] for record in records)
        return written

    async def mark_succeeded_with_conn(
        self,
        connection: Any,
        lease: Lease,
        result_json: str | None,
        *,
        fallback_result_ttl: timedelta | None = None,
        ran_for: float = 0.0,
    ) -> bool:
        # Through the general ``settle``, not the hot path's statement: this keeps its success
        # branch in use.
        settlement = Settlement.of(
            lease,
            "succeeded",
            result_json=result_json,
            fallback_result_ttl=fallback_result_ttl,
            ran_for=ran_for,
        )
        return bool(await settle_rows(self, connection, [settlement]))

    # --- every other outcome -------------------------------------------------------------------
    async def mark_failed_or_retry(
        self,
        lease: Lease,
        error: ErrorInfo,
        retry_delay: timedelta | None,
        *,
        ran_for: float | None = None,
    ) -> JobRow | None:
        # The row is read back in the settle's transaction: exactly what it wrote.
        settlement = Settlement.of(
            lease,
            "failed" if retry_delay is None else "retry",
            delay=retry_delay,
            ran_for=ran_for,
            error_class=error.error_class,
            error_message=error.message,
            error_traceback=error.traceback,
        )
        async with self._pool.acquire() as conn, conn.transaction():
            if not await settle_rows(self, conn, [settlement]):
                return None
            record = await conn.fetchrow(self._queries["get_job"], lease.job_id)
        return None if record is None else rows.job(record)

    async def mark_cancelled(self, lease: Lease, *, ran_for: float | None = None) -> bool:
        return await self._settle_one(lease, "cancelled", ran_for=ran_for) is not None

    async def mark_interrupted(
        self, lease: Lease, *, reason: str = "shutdown", ran_for: float | None = None
    ) -> JobStatus | None:
        ran = 0.0 if ran_for is None else ran_for
        return _status(await self._settle_one(lease, "interrupted", ran_for=ran, reason=reason))

    async def mark_abandoned(self, lease: Lease, reason: str) -> JobStatus | None:
        settled = await self._settle_one(
            lease,
            "abandoned",
            ran_for=0.0,  # an abandoned body ran until now when its start was not recorded
            error_class="Abandoned",
            error_message=reason,
            reason=reason,
        )
        return _status(settled)

    async def mark_snoozed(
        self, lease: Lease, delay: timedelta, *, ran_for: float | None = None
    ) -> SnoozeOutcome:
        settled = await self._settle_one(lease, "snooze", delay=delay, ran_for=ran_for)
        if settled is None:
            return "noop"
        return cast(SnoozeOutcome, settled.partition(":")[0])

    async def mark_retry_after(
        self,
        lease: Lease,
        delay: timedelta,
        *,
        consume_budget: bool = True,
        ran_for: float | None = None,
        reason: str | None = None,
    ) -> RetryAfterOutcome:
        settled = await self._settle_one(
            lease,
            "retry_after",
            delay=delay,
            consume_budget=consume_budget,
            ran_for=ran_for,
            reason=reason,
        )
        return cast(RetryAfterOutcome, "noop" if settled is None else settled)

    async def mark_denied_many(
        self, worker_id: UUID, denials: Sequence[Denied]
    ) -> dict[UUID, RetryAfterOutcome]:
        # settle_denied writes the denials it covers; settle the rest (a cancel requested, a
        # deadline, a start on the row: seldom). Not one transaction: settle's own fence
        # re-reads whatever changed in between.
        outcomes: dict[UUID, RetryAfterOutcome] = {d.job_id: "noop" for d in denials}
        if not outcomes:
            return outcomes
        records = await _unstorable_as_taskq_error(
            self._pool.fetch(
                self._queries["settle_denied"],
                worker_id,
                [d.job_id for d in denials],
                [d.attempt for d in denials],
                [d.delay for d in denials],
                [d.reason for d in denials],
                self._wake_channel,
                DENIAL_GRID_SECONDS,
            )
        )
        left = {r["id"] for r in records if not r["covered"]}
        outcomes.update((r["id"], "scheduled") for r in records if r["covered"])
        for denied in denials:
            if denied.job_id not in left:
                continue
            left.discard(denied.job_id)  # a job listed twice is settled once
            lease = Lease(denied.job_id, worker_id, denied.attempt)
            outcomes[denied.job_id] = await self.mark_retry_after(
                lease, denied.delay, consume_budget=False, reason=denied.reason
            )
        return outcomes

    async def release_leases(
        self,
        worker_id: UUID,
        leases: Sequence[Lease],
        *,
        reason: str,
        retry_delay: timedelta = timedelta(0),
        error: ErrorInfo | None = None,
        ran: Collection[UUID] = (),
    ) -> int:
        if not leases:
            return 0
        error = derived.release_error(reason, error)
        settlements = [
            Settlement(
                lease.job_id,
                lease.attempt,
                worker_id,
                "released",
                delay=retry_delay,
                error_class=error.error_class,
                error_message=error.message,
                reason=reason,
                ran_for=0.0 if lease.job_id in ran else None,  # the body ran: it started
            )
            for lease in leases
        ]
        return len(await settle_rows(self, self._pool, settlements))
