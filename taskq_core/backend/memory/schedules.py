"""Cron schedules in memory: the operator's and the code's writes, on the injected clock.

The rows are frozen ScheduleRecords replaced on every write; the fire-time rules are the
ones PostgreSQL's part applies (``protocol.schedules``). Each method awaits nothing, so it is
atomic, as the Postgres part's transaction is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

# Mirrors postgres/schedules.py on purpose: both implement protocol.schedules, so they import the
# same names and restate the same signatures.
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
from taskq_core.backend.protocol.values import stored_retry
from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.ids import uuid7
from taskq_core.retry import DEFAULT_RETRY_POLICY

from .jsonb import as_json
from .lookups import unique_holder
from .store import PENDING, JobRecord, MemoryStore


def _stored(row: ScheduleRecord) -> ScheduleRecord:
    """``row`` sharing nothing mutable with its source (the payload round-trips as jsonb)."""
    return replace(row, payload=as_json(row.payload))


class SchedulePart(MemoryStore):
    """create, get, list, update and delete schedules; the code's upsert at worker start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._schedules: dict[str, ScheduleRecord] = {}

    async def create_schedule(
        self, spec: ScheduleSpec, *, audit: Audit | None = None
    ) -> ScheduleRecord:
        # The first fire time after the injected clock's now.
        row = new_schedule(spec, self._now(), declared_in_code=False)
        check_payload(row.actor, row.payload, self.max_payload_bytes)
        if spec.name in self._schedules:
            raise ScheduleExistsError(spec.name)
        self._schedules[spec.name] = _stored(row)
        if audit is not None:
            self._log_operator("schedule_create", spec.name, audit, created_detail(row))
        return _stored(row)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        row = self._schedules.get(name)
        return None if row is None else _stored(row)

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        return [
            _stored(row)
            for name, row in sorted(self._schedules.items())
            if (actor is None or row.actor == actor) and (enabled is None or row.enabled == enabled)
        ]

    async def update_schedule(
        self, name: str, update: ScheduleUpdate, *, audit: Audit | None = None
    ) -> ScheduleRecord | None:
        # At the injected clock's now.
        current = self._schedules.get(name)
        if current is None:
            return None
        row = _stored(updated_schedule(current, update, self._now()))
        check_payload(row.actor, row.payload, self.max_payload_bytes)
        self._schedules[name] = row
        if audit is not None:
            changed = schedule_changes(current, row)
            self._log_operator("schedule_update", name, audit, {"changed": changed})
        return _stored(row)

    async def delete_schedule(self, name: str, *, audit: Audit | None = None) -> bool:
        deleted = self._schedules.pop(name, None)
        if deleted is not None and audit is not None:
            self._log_operator("schedule_delete", name, audit, created_detail(deleted))
        return deleted is not None

    async def sync_code_schedules(self, specs: Sequence[ScheduleSpec]) -> ScheduleSyncResult:
        # At once: nothing here suspends, so it is atomic.
        for spec in specs:  # each fire copies the payload into a job: the enqueue's limit
            check_payload(spec.actor, spec.payload, self.max_payload_bytes)
        names = {spec.name for spec in specs}
        stored = [r for r in self._schedules.values() if r.name in names or r.declared_in_code]
        plan = plan_code_schedules(specs, stored, self._now())
        for row in plan.writes:
            self._schedules[row.name] = _stored(row)
        return plan.result

    async def fire_due_schedules(self, limit: int) -> list[FiredSchedule]:
        # At once: nothing here suspends, so the tick is atomic.
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        now = self._now()
        due = sorted(
            (r for r in self._schedules.values() if r.enabled and r.next_fire_at is not None),
            key=lambda r: (r.next_fire_at, r.name),
        )
        fired: list[FiredSchedule] = []
        for row in due:
            if row.next_fire_at is None or row.next_fire_at > now or len(fired) == limit:
                break
            try:
                plan = due_fire(row.cron, row.timezone, row.next_fire_at, now)
            except ValueError:  # a zone this system no longer knows: as on Postgres, left
                continue
            key = schedule_job_key(row.name, plan.fire_at)
            job = None if unique_holder(self, key) is not None else self._job_of(row, plan, key)
            if job is not None:
                self._jobs[job.id] = job
            self._schedules[row.name] = replace(
                row,
                next_fire_at=plan.next_fire_at,
                last_fired_at=plan.fire_at,
                last_job_id=None if job is None else job.id,
                updated_at=now,
            )
            job_id = None if job is None else job.id
            fired.append(
                FiredSchedule(row.name, plan.fire_at, job_id, plan.next_fire_at, plan.missed_since)
            )
        if any(f.job_id is not None for f in fired):
            self._wake()
        return fired

    def _job_of(self, row: ScheduleRecord, plan: DueFire, key: str) -> JobRecord:
        """The pending job a fire makes: the schedule's actor and payload, its queue or the
        actor's stored one, the actor's stored retry policy and priority (the defaults of a
        by-name enqueue while no worker has registered it)."""
        now = self._now()
        stored = self._actor_configs.get(row.actor)
        config = None if stored is None else stored.snapshot()
        retry = (None if config is None else stored_retry(config)) or DEFAULT_RETRY_POLICY
        budget = retry.time_budget if retry.kind == "indefinite" else None
        # Alike supervisor/exits.py's give_up and worker/runtime.py's _build_deps by shape only:
        # keyword arguments, other data.
        return JobRecord(
            id=uuid7(),
            actor=row.actor,
            queue=row.queue or (DEFAULT_QUEUE if config is None else config.queue),
            payload=as_json(row.payload),
            status=PENDING,
            priority=(config.priority if config is not None else None) or 0,
            scheduled_at=now,
            created_at=now,
            updated_at=now,
            retry_kind=retry.kind,
            max_attempts=retry.max_attempts,
            identity_key=None,
            fairness_key=None,
            schedule_to_close=None if budget is None else now + budget,
            result_ttl=None,
            metadata=schedule_job_metadata(row.name, plan.fire_at),
            trace_id=None,
            span_id=None,
            unique_key=key,
            unique_until=plan.fire_at,
        )
