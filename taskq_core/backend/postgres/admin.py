"""Reads and operator writes: jobs and their history, the dashboard, cancel and retry
requests, an operator's requeue, fail, move and purge, and who did each (the audit stamp on
job events, the operator log). Workers, actor configs and queues: ``registry.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg

from taskq_core.backend.protocol import (
    AttemptRow,
    BulkCancelResult,
    CancelOutcome,
    DashboardStats,
    DispatchPosition,
    EventRow,
    JobFilter,
    JobRow,
    JobSummary,
    QueueStatusCount,
    check_dashboard_window,
    check_recent_limit,
)
from taskq_core.backend.protocol.admin import (
    DUE_SCHEDULED_SCAN,
    JOB_ID_HEX_DIGITS,
    Audit,
    ForcedEnd,
    ForcedEndResult,
    JobIdSearchTooSlowError,
    JobPage,
    JobQuery,
    OperatorLogEntry,
    PurgeResult,
    TimeBound,
    normalize_id_fragment,
)
from taskq_core.backend.protocol.admin_rules import (
    filter_document,
    forced_end_error,
)
from taskq_core.statemachine import JobStatus

from . import bulk, rows
from .core import BackendCore, one_on
from .settle import Settlement, settle_rows

# How long a suffix search may scan the ids before it gives up (PostgreSQL's syntax).
SUFFIX_SEARCH_TIMEOUT = "10s"


def _time_bound(bound: TimeBound) -> tuple[Any, Any]:
    """A JobQuery time bound as the ($absolute, $age) pair the search statements take."""
    if isinstance(bound, timedelta):
        return None, bound
    return bound, None


class AdminPart(BackendCore):
    """Reads for the client, CLI and dashboard; operator writes."""

    # --- reads -------------------------------------------------------------------------------
    async def get(self, job_id: UUID) -> JobRow | None:
        record = await self._pool.fetchrow(self._queries["get_job"], job_id)
        return None if record is None else rows.job(record)

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        records = await self._fetch_custom_plan("list_jobs", *rows.filter_args(filter))
        return [rows.job(r) for r in records]

    async def _fetch_custom_plan(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run an operator query planned for its actual arguments.

        The pool plans generically (right for the hot path); a filter query's best index
        depends on which filters are set, and its generic plan scans the whole table.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(self._queries["use_custom_plans"])
            return list(await conn.fetch(self._queries[name], *args))

    async def count_by_queue_status(self) -> list[QueueStatusCount]:
        records = await self._pool.fetch(self._queries["count_by_queue_status"])
        return [QueueStatusCount(r["queue"], JobStatus(r["status"]), r["count"]) for r in records]

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        return bool(await self._pool.fetchval(self._queries["has_active_jobs"], list(queues)))

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        records = await self._pool.fetch(self._queries["count_pending_jobs"], list(actors))
        return {r["actor"]: r["count"] for r in records}

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        records = await self._pool.fetch(self._queries["get_actor_max_pending"])
        return {r["actor"]: r["max_pending"] for r in records}

    async def count_jobs(self, filter: JobFilter) -> int:
        records = await self._fetch_custom_plan("count_jobs", *rows.filter_args(filter))
        return int(records[0]["count"])

    async def list_job_ids_matching(self, fragment: str, limit: int) -> list[UUID]:
        # A prefix is a primary-key range; a suffix a scan bounded by SUFFIX_SEARCH_TIMEOUT.
        digits = normalize_id_fragment(fragment)
        if limit <= 0:
            return []
        low = UUID(digits.ljust(JOB_ID_HEX_DIGITS, "0"))
        high = UUID(digits.ljust(JOB_ID_HEX_DIGITS, "f"))
        prefixed = await self._pool.fetch(self._queries["find_job_ids_by_prefix"], low, high, limit)
        found: set[UUID] = {r["id"] for r in prefixed}
        if len(digits) < JOB_ID_HEX_DIGITS:
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    self._queries["set_local_statement_timeout"], SUFFIX_SEARCH_TIMEOUT
                )
                try:
                    suffixed = await conn.fetch(
                        self._queries["find_job_ids_by_suffix"], digits, len(digits), limit
                    )
                except asyncpg.QueryCanceledError:
                    raise JobIdSearchTooSlowError(
                        f"looking for job ids ending in {digits!r} took longer than "
                        f"{SUFFIX_SEARCH_TIMEOUT}; give the start of the id or all of it"
                    ) from None
            found.update(r["id"] for r in suffixed)
        return sorted(found)[:limit]

    async def search_jobs(self, query: JobQuery) -> JobPage:
        statuses = None if query.statuses is None else [s.value for s in query.statuses]
        matching = (
            statuses,
            None if query.queues is None else list(query.queues),
            None if query.actors is None else list(query.actors),
            *_time_bound(query.created_since),
            *_time_bound(query.created_until),
            *_time_bound(query.finished_since),
            *_time_bound(query.finished_until),
            query.batch_id,
        )
        after_at, after_id = query.after if query.after is not None else (None, None)
        # One row past the page says whether there is a next one.
        records = await self._fetch_custom_plan(
            "search_jobs", *matching, after_at, after_id, query.limit + 1
        )
        counted = await self._fetch_custom_plan("count_search_jobs", *matching, query.count_max + 1)
        jobs = [rows.job_summary(r) for r in records[: query.limit]]
        more = len(records) > query.limit and bool(jobs)
        total = int(counted[0]["count"])
        return JobPage(
            jobs=jobs,
            total=min(total, query.count_max),
            total_exact=total <= query.count_max,
            next_after=(jobs[-1].created_at, jobs[-1].id) if more else None,
        )

    async def get_dispatch_position(self, job_id: UUID) -> DispatchPosition | None:
        # On the database clock.
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
    async def get_dashboard_stats(self, window: timedelta, minutes: int) -> DashboardStats:
        # Every read of jobs is index-backed.
        check_dashboard_window(window, minutes)
        records = await self._pool.fetch(
            self._queries["get_dashboard_stats"], window, minutes, DUE_SCHEDULED_SCAN
        )
        queues = [rows.queue_activity(r, minutes) for r in records if r["name"] is not None]
        return DashboardStats(now=records[0]["now"], window=window, queues=queues)

    async def list_recent_jobs(self, filter: JobFilter) -> list[JobSummary]:
        # Each status read from its own index.
        check_recent_limit(filter)
        records = await self._pool.fetch(
            self._queries["list_recent_jobs"],
            rows.statuses(filter),
            filter.queue,
            filter.actor,
            filter.limit,
        )
        return [rows.job_summary(r) for r in records]

    # --- history -----------------------------------------------------------------------------
    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        return [
            rows.attempt(r) for r in await self._pool.fetch(self._queries["get_attempts"], job_id)
        ]

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        return [rows.event(r) for r in await self._pool.fetch(self._queries["get_events"], job_id)]

    # --- audit -------------------------------------------------------------------------------
    @asynccontextmanager
    async def _audited(self, audit: Audit | None, **detail: Any) -> AsyncIterator[Any]:
        """A transaction whose job events gain ``audit`` (and ``detail``) before it commits:
        the statements run on the yielded connection write their events by their own rules,
        and ``stamp_operator_events`` merges who and why into each of them."""
        async with self._pool.acquire() as conn, conn.transaction():
            stamp = {**detail, **(audit.detail() if audit is not None else {})}
            since = await conn.fetchval(self._queries["last_event_id"]) if stamp else None
            yield conn
            if stamp:
                await conn.execute(self._queries["stamp_operator_events"], since, bulk.dumps(stamp))

    async def _audited_where(
        self, audit: Audit | None, query: str, filter: JobFilter, *args: Any
    ) -> asyncpg.Record:
        """The bulk write ``query`` over the jobs ``filter`` matches (then ``args``), in an
        ``_audited`` transaction: its one record."""
        async with self._audited(audit) as conn:
            return await one_on(conn, self._queries[query], *rows.filter_args(filter), *args)

    async def list_operator_log(
        self, *, action: str | None = None, target: str | None = None, limit: int = 100
    ) -> list[OperatorLogEntry]:
        records = await self._pool.fetch(self._queries["list_operator_log"], target, limit, action)
        return [rows.operator_log_entry(r) for r in records]

    # --- cancel ------------------------------------------------------------------------------
    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
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

    async def cancel_where(
        self, filter: JobFilter, reason: str | None, *, audit: Audit | None = None
    ) -> BulkCancelResult:
        record = await self._audited_where(
            audit, "cancel_where", filter, reason, self._events_channel
        )
        return BulkCancelResult(cancelled=record["cancelled"], requested=record["requested"])

    # --- admin -------------------------------------------------------------------------------
    async def retry_job(self, job_id: UUID) -> bool:
        record = await self._one(
            self._queries["retry_jobs"], None, None, None, [job_id], None, self._wake_channel
        )
        return bool(record["retried"])

    async def retry_where(self, filter: JobFilter, *, audit: Audit | None = None) -> int:
        record = await self._audited_where(audit, "retry_jobs", filter, self._wake_channel)
        return int(record["retried"])

    # --- stuck work --------------------------------------------------------------------------
    async def end_running_job(self, job_id: UUID, end: ForcedEnd, audit: Audit) -> ForcedEndResult:
        # Through ``settle``, fenced by the lease read with the row: a worker that settled it
        # first wins.
        job = await self.get(job_id)
        if job is None or job.status is not JobStatus.RUNNING or job.locked_by_worker is None:
            return ForcedEndResult(job, settled=False)
        error_class, message = forced_end_error(end, audit)
        settlement = Settlement.of(
            job.lease(),
            "reclaimed" if end == "requeue" else "failed",
            error_class=error_class,
            error_message=message,
            reason="operator_requeue" if end == "requeue" else None,
        )
        reason = "operator_requeue" if end == "requeue" else "operator_fail"
        async with self._audited(audit, reason=reason) as conn:
            settled = await settle_rows(self, conn, [settlement])
        return ForcedEndResult(await self.get(job_id), settled=bool(settled))

    async def move_where(self, filter: JobFilter, to_queue: str, audit: Audit) -> int:
        record = await self._audited_where(audit, "move_jobs", filter, to_queue, self._wake_channel)
        return int(record["moved"])

    async def purge_where(self, filter: JobFilter, audit: Audit) -> PurgeResult:
        record = await self._one(
            self._queries["purge_jobs"],
            *rows.filter_args(filter),
            audit.by,
            audit.reason,
            bulk.dumps(filter_document(filter)),
        )
        deleted = rows.status_counts(record["statuses"], record["counts"])
        return PurgeResult(deleted=deleted, running_skipped=int(record["running_skipped"]))
