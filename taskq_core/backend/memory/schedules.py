"""Cron schedules in memory: the operator's and the code's writes, on the injected clock.

The rows are frozen ScheduleRecords replaced on every write; the fire-time rules are the
ones PostgreSQL's part applies (``protocol.schedules``). Each method awaits nothing, so it is
atomic, as the Postgres part's transaction is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from taskq_core.backend.protocol.schedules import (
    FiredSchedule,
    ScheduleExistsError,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleSyncResult,
    ScheduleUpdate,
    new_schedule,
    plan_code_schedules,
    updated_schedule,
)

from .store import MemoryStore, as_json


def _stored(row: ScheduleRecord) -> ScheduleRecord:
    """``row`` sharing nothing mutable with its source (the payload round-trips as jsonb)."""
    return replace(row, payload=as_json(row.payload))


class SchedulePart(MemoryStore):
    """create, get, list, update and delete schedules; the code's upsert at worker start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._schedules: dict[str, ScheduleRecord] = {}

    async def create_schedule(self, spec: ScheduleSpec) -> ScheduleRecord:
        """Insert an enabled schedule, its first fire time after the clock's now."""
        row = new_schedule(spec, self._now(), declared_in_code=False)
        if spec.name in self._schedules:
            raise ScheduleExistsError(spec.name)
        self._schedules[spec.name] = _stored(row)
        return _stored(row)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """One schedule by name, or None."""
        row = self._schedules.get(name)
        return None if row is None else _stored(row)

    async def list_schedules(
        self, *, actor: str | None = None, enabled: bool | None = None
    ) -> list[ScheduleRecord]:
        """Schedules by name, optionally of one actor or one enabled state."""
        return [
            _stored(row)
            for name, row in sorted(self._schedules.items())
            if (actor is None or row.actor == actor) and (enabled is None or row.enabled == enabled)
        ]

    async def update_schedule(self, name: str, update: ScheduleUpdate) -> ScheduleRecord | None:
        """Apply ``update`` (see ScheduleUpdate) at the clock's now."""
        current = self._schedules.get(name)
        if current is None:
            return None
        row = _stored(updated_schedule(current, update, self._now()))
        self._schedules[name] = row
        return _stored(row)

    async def delete_schedule(self, name: str) -> bool:
        """Delete the schedule (its jobs stay); False when there was none."""
        return self._schedules.pop(name, None) is not None

    async def sync_code_schedules(self, specs: Sequence[ScheduleSpec]) -> ScheduleSyncResult:
        """Upsert the declared schedules at once (see the protocol)."""
        names = {spec.name for spec in specs}
        stored = [r for r in self._schedules.values() if r.name in names or r.declared_in_code]
        plan = plan_code_schedules(specs, stored, self._now())
        for row in plan.writes:
            self._schedules[row.name] = _stored(row)
        return plan.result

    async def fire_due_schedules(self, limit: int) -> list[FiredSchedule]:
        """The leader's tick (next commit)."""
        raise NotImplementedError("fire_due_schedules is not implemented yet")
