"""Cron schedules on PostgreSQL: the operator's and the code's writes (sql/schedules.sql).

Fire times are computed in Python from the database clock read in the writing transaction
(the rules live in ``protocol.schedules``: ``new_schedule``, ``updated_schedule``,
``plan_code_schedules``), so every backend plans them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

import asyncpg
import structlog

# Mirrors memory/schedules.py on purpose: both implement protocol.schedules, so they import the same
# names and restate the same signatures.
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.schedules import (
    DueFire,
    FiredSchedule,
    ScheduleExistsError,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleSyncResult,
    ScheduleUpdate,
    created_detail,
    due_fire,
    new_schedule,
    plan_code_schedules,
    schedule_changes,
    schedule_job_key,
    schedule_job_metadata,
    updated_schedule,
)
from taskq_core.backend.protocol.sizes import check_payload
from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.ids import uuid7_batch
from taskq_core.retry import DEFAULT_RETRY_POLICY

from . import bulk
from .core import BackendCore

# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="postgres_backend")
_FIELDS = tuple(f.name for f in fields(ScheduleRecord))


def _record(record: asyncpg.Record) -> ScheduleRecord:
    """A ``schedules`` record as a ScheduleRecord (payload decoded by the pool codec)."""
    return ScheduleRecord(**{name: record[name] for name in _FIELDS})


class SchedulePart(BackendCore):
    """create, get, list, update and delete schedules; the code's upsert at worker start."""

    async def create_schedule(
        self, spec: ScheduleSpec, *, audit: Audit | None = None
    ) -> ScheduleRecord:
        # The first fire time after the database's now.
        async with self._pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval(self._queries["schedule_clock"])
            row = new_schedule(spec, now, declared_in_code=False)
            check_payload(row.actor, row.payload, self.max_payload_bytes)
            record = await conn.fetchrow(self._queries["insert_schedule"], *_inserted(row, now))
            if record is None:
                raise ScheduleExistsError(spec.name)
            if audit is not None:
                await self._log_operator(
                    conn, "schedule_create", spec.name, audit, created_detail(row)
                )
        return _record(record)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        record = await self._pool.fetchrow(self._queries["get_schedule"], name)
        return None if record is None else _record(record)

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        records = await self._pool.fetch(self._queries["list_schedules"], actor, enabled)
        return [_record(r) for r in records]

    async def update_schedule(
        self, name: str, update: ScheduleUpdate, *, audit: Audit | None = None
    ) -> ScheduleRecord | None:
        # On the locked row, timed on the database's clock.
        async with self._pool.acquire() as conn, conn.transaction():
            locked = await conn.fetchrow(self._queries["lock_schedule"], name)
            if locked is None:
                return None
            now: datetime = await conn.fetchval(self._queries["schedule_clock"])
            before = _record(locked)
            row = updated_schedule(before, update, now)
            check_payload(row.actor, row.payload, self.max_payload_bytes)
            record = await conn.fetchrow(self._queries["write_schedule"], *_written(row))
            if record is None:
                return None
            after = _record(record)
            if audit is not None:
                changed = schedule_changes(before, after)
                await self._log_operator(conn, "schedule_update", name, audit, {"changed": changed})
        return after

    async def delete_schedule(self, name: str, *, audit: Audit | None = None) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            record = await conn.fetchrow(self._queries["delete_schedule"], name)
            if record is not None and audit is not None:
                detail = created_detail(_record(record))
                await self._log_operator(conn, "schedule_delete", name, audit, detail)
        return record is not None

    async def sync_code_schedules(self, specs: Sequence[ScheduleSpec]) -> ScheduleSyncResult:
        # One transaction.
        for spec in specs:  # each fire copies the payload into a job: the enqueue's limit
            check_payload(spec.actor, spec.payload, self.max_payload_bytes)
        names = [spec.name for spec in specs]
        async with self._pool.acquire() as conn, conn.transaction():
            stored = await conn.fetch(self._queries["lock_code_schedules"], names)
            now: datetime = await conn.fetchval(self._queries["schedule_clock"])
            plan = plan_code_schedules(specs, [_record(r) for r in stored], now)
            if plan.writes:
                columns = list(zip(*(_upserted(row) for row in plan.writes), strict=True))
                await conn.execute(self._queries["upsert_code_schedules"], *map(list, columns), now)
        return plan.result

    async def fire_due_schedules(self, limit: int) -> list[FiredSchedule]:
        # One transaction: pick the due schedules (locked, on the database's clock), plan each
        # fire, insert the jobs and move the schedules on.
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        async with self._pool.acquire() as conn, conn.transaction():
            picked = await conn.fetch(self._queries["fire_due_pick"], limit)
            now: datetime = picked[0]["now"]
            due = [(r, plan) for r in picked if (plan := _plan(r, now)) is not None]
            if not due:
                return []
            keys = [schedule_job_key(r["name"], plan.fire_at) for r, plan in due]
            metadata = [schedule_job_metadata(r["name"], plan.fire_at) for r, plan in due]
            records = await conn.fetch(
                self._queries["fire_schedules"],
                [r["id"] for r, _ in due],
                uuid7_batch(len(due)),
                [plan.fire_at for _, plan in due],
                [plan.next_fire_at for _, plan in due],
                keys,
                [bulk.dumps(m) for m in metadata],
                now,
                DEFAULT_QUEUE,
                DEFAULT_RETRY_POLICY.kind,
                DEFAULT_RETRY_POLICY.max_attempts,
                self._wake_channel,
            )
        jobs = {r["schedule_id"]: r["job_id"] for r in records}
        return [
            FiredSchedule(
                r["name"], plan.fire_at, jobs[r["id"]], plan.next_fire_at, plan.missed_since
            )
            for r, plan in due
        ]


def _plan(picked: asyncpg.Record, now: datetime) -> DueFire | None:
    """The fire of one picked row, or None for no row (nothing due) or a row whose stored
    expression or zone no longer plans (a zone this system's tz database dropped): logged
    and left as it is, so one broken schedule never stops the others."""
    if picked["id"] is None:
        return None
    try:
        return due_fire(picked["cron"], picked["timezone"], picked["next_fire_at"], now)
    except ValueError as exc:
        _log.warning("schedule_unplannable", schedule=picked["name"], error=str(exc))
        return None


# The three statements' parameters, each spelled out in its own order on purpose: they differ
# in a column or two, and a shared list would hide which statement takes which.
def _inserted(row: ScheduleRecord, now: datetime) -> tuple[Any, ...]:
    """insert_schedule's parameters for ``row``, created at ``now``."""
    return (
        row.id,
        row.name,
        row.actor,
        row.queue,
        row.cron,
        row.timezone,
        row.payload,
        row.enabled,
        row.next_fire_at,
        row.declared_in_code,
        now,
    )


def _written(row: ScheduleRecord) -> tuple[Any, ...]:
    """write_schedule's parameters for ``row``."""
    return (
        row.id,
        row.actor,
        row.queue,
        row.cron,
        row.timezone,
        row.payload,
        row.enabled,
        row.next_fire_at,
        row.updated_at,
    )


def _upserted(row: ScheduleRecord) -> tuple[Any, ...]:
    """One row of upsert_code_schedules' arrays (JSON as text, as arrays carry it)."""
    return (
        row.id,
        row.name,
        row.actor,
        row.queue,
        row.cron,
        row.timezone,
        bulk.dumps(row.payload),
        row.enabled,
        row.next_fire_at,
    )
