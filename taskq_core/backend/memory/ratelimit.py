"""Rate limits and reservations in memory: token buckets, sliding windows and reservation slots
on the injected Clock, with PostgreSQL's semantics (sql/ratelimit.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

# Names postgres/ratelimit.py imports too, on purpose: both implement protocol.ratelimit.
from taskq_core.backend.protocol.ratelimit import (
    HeldSlot,
    IdleStateSwept,
    LimitDefinition,
    LimitGrant,
    LimitUsage,
    acquire_one_token,
)
from taskq_core.statemachine import ACTIVE_STATUSES

from .store import MemoryStore


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated_at: datetime


@dataclass(slots=True)
class _Slot:
    job_id: UUID | None = None
    worker_id: UUID | None = None
    lease_expires_at: datetime | None = None

    def free(self) -> None:
        self.job_id = self.worker_id = self.lease_expires_at = None


@dataclass(slots=True)
class _LimitTables:
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    windows: dict[str, list[datetime]] = field(default_factory=dict)  # uses, oldest first
    lines: dict[str, datetime] = field(default_factory=dict)  # limit -> end of its line
    slots: dict[tuple[str, int], _Slot] = field(default_factory=dict)
    definitions: dict[str, LimitDefinition] = field(default_factory=dict)


def _of(limit: LimitDefinition, instance: str) -> bool:
    """Whether ``instance`` is limit ``limit`` or, keyed, one of its instances."""
    return instance == limit.name or (limit.keyed and instance.startswith(f"{limit.name}:"))


def _definition(
    definitions: dict[str, LimitDefinition], kind: str, instance: str
) -> LimitDefinition | None:
    """The registered limit of ``kind`` that ``instance`` belongs to (the longest name)."""
    owners = [d for d in definitions.values() if d.kind == kind and _of(d, instance)]
    return max(owners, key=lambda d: len(d.name), default=None)


# Mirrors postgres/ratelimit.py on purpose: both implement protocol.ratelimit, so each method
# restates its signature (mypy checks the match).
class RateLimitPart(MemoryStore):
    """The limiter state store and reservation slots of InMemoryBackend."""

    _limit_tables: _LimitTables | None = None

    def _limits(self) -> _LimitTables:
        if self._limit_tables is None:
            self._limit_tables = _LimitTables()
        return self._limit_tables

    acquire_token = acquire_one_token

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        # Nothing else runs between the calls here: one pass. From the first call the tokens
        # do not cover on, every call is denied (as the one statement on PostgreSQL).
        grants: list[LimitGrant] = []
        for cost in costs:
            if grants and not grants[-1].allowed:
                grants.append(self._denied_token(key, rate, burst, cost))
            else:
                grants.append(self._take_tokens(key, rate, burst, cost))
        return grants

    def _take_tokens(self, key: str, rate: float, burst: float, cost: int) -> LimitGrant:
        now = self._now()
        bucket = self._limits().buckets.get(key)
        if bucket is None:
            self._limits().buckets[key] = _Bucket(burst - cost, now)
            return LimitGrant(True, remaining=burst - cost)
        # As on PostgreSQL: time the bucket already counted (a clock reading ahead of this
        # one) is neither refilled again nor skipped by a denied call's wait.
        elapsed = (now - bucket.updated_at).total_seconds()
        available = min(burst, bucket.tokens + rate * max(elapsed, 0.0))
        if available < cost:
            return self._denied_token(key, rate, burst, cost)
        bucket.tokens, bucket.updated_at = available - cost, max(bucket.updated_at, now)
        return LimitGrant(True, remaining=bucket.tokens)

    def _denied_token(self, key: str, rate: float, burst: float, cost: int) -> LimitGrant:
        now = self._now()
        bucket = self._limits().buckets[key]
        counted = min(burst, bucket.tokens + rate * (now - bucket.updated_at).total_seconds())
        token_at = now + timedelta(seconds=(cost - counted) / rate)
        return self._placed(key, token_at, timedelta(seconds=1 / rate), cost)

    async def acquire_window(
        self, key: str, limit: int, window: timedelta, cost: int = 1
    ) -> LimitGrant:
        now = self._now()
        uses = [at for at in self._limits().windows.get(key, []) if at > now - window]
        self._limits().windows[key] = uses
        if len(uses) + cost > limit:
            oldest = uses[len(uses) + cost - limit - 1]  # the last use that must leave
            return self._placed(key, max(oldest + window, now), window / limit, cost)
        uses.extend([now] * cost)
        return LimitGrant(True, remaining=float(limit - len(uses)))

    def _placed(self, key: str, free_at: datetime, step: timedelta, cost: int) -> LimitGrant:
        """A denial at the next place of ``key``'s line: ``cost`` steps after the previous
        place, not before ``free_at`` (as rate_limit_lines on PostgreSQL)."""
        lines = self._limits().lines
        place = max(lines[key] + step * (cost - 1), free_at) if key in lines else free_at
        lines[key] = place + step
        return LimitGrant(False, max(place - self._now(), timedelta(0)), 0.0)

    async def acquire_reservation(
        self, name: str, slots: int, job_id: UUID, worker_id: UUID, lease: timedelta
    ) -> bool:
        now = self._now()
        rows = [self._limits().slots.setdefault((name, n), _Slot()) for n in range(slots)]
        mine = [row for row in rows if row.job_id == job_id]
        free = [
            row
            for row in rows
            if row.job_id is None or (row.lease_expires_at and row.lease_expires_at <= now)
        ]
        if not mine and not free:
            return False
        chosen = (mine or free)[0]
        chosen.job_id, chosen.worker_id, chosen.lease_expires_at = job_id, worker_id, now + lease
        return True

    async def get_queue_caps(self, queues: Sequence[str]) -> dict[str, int]:
        rows = {name: self._queues.get(name) for name in queues}
        return {
            name: row.max_concurrent
            for name, row in rows.items()
            if row is not None and row.max_concurrent is not None
        }

    async def release_reservations(
        self, job_id: UUID, worker_id: UUID, names: Sequence[str] | None = None
    ) -> int:
        freed = 0
        for (name, _), row in self._limits().slots.items():
            mine = row.job_id == job_id and row.worker_id == worker_id
            if mine and (names is None or name in names):
                row.free()
                freed += 1
        return freed

    async def extend_reservation_leases(
        self, worker_id: UUID, job_ids: Sequence[UUID], lease: timedelta
    ) -> int:
        wanted, until, renewed = set(job_ids), self._now() + lease, 0
        for row in self._limits().slots.values():
            if row.worker_id == worker_id and row.job_id in wanted:
                row.lease_expires_at = until
                renewed += 1
        return renewed

    async def sweep_leaked_reservation_slots(self) -> int:
        now, freed = self._now(), 0
        for row in self._limits().slots.values():
            if row.job_id is None:
                continue
            job = self._jobs.get(row.job_id)
            expired = row.lease_expires_at is not None and row.lease_expires_at <= now
            if expired or job is None or job.status not in ACTIVE_STATUSES:
                row.free()
                freed += 1
        return freed

    async def list_held_reservation_slots(self, name: str | None = None) -> list[HeldSlot]:
        now = self._now()
        held = [
            HeldSlot(slot_name, slot, row.job_id, row.worker_id, row.lease_expires_at)
            for (slot_name, slot), row in self._limits().slots.items()
            if row.job_id is not None
            and row.worker_id is not None
            and row.lease_expires_at is not None
            and row.lease_expires_at > now
            and (name is None or slot_name == name)
        ]
        return sorted(held, key=lambda h: (h.name, h.slot))

    async def register_rate_limits(self, definitions: Sequence[LimitDefinition]) -> None:
        for definition in definitions:
            self._limits().definitions[definition.name] = definition

    async def sweep_idle_limiter_state(self, idle: timedelta, limit: int = 1000) -> IdleStateSwept:
        tables, before = self._limits(), self._now() - idle
        buckets: list[str] = []
        for key, bucket in tables.buckets.items():
            rule = _definition(tables.definitions, "token_bucket", key)
            refill = 0.0 if rule is None or not rule.per_second else rule.capacity / rule.per_second
            if bucket.updated_at < before - timedelta(seconds=refill) and len(buckets) < limit:
                buckets.append(key)
        windows: list[str] = []
        for key, uses in tables.windows.items():
            rule = _definition(tables.definitions, "sliding_window", key)
            span = rule.span if rule is not None and rule.span is not None else timedelta(0)
            last = uses[-1] if uses else None
            if (last is None or last < before - span) and len(windows) < limit:
                windows.append(key)
        for key in buckets:
            del tables.buckets[key]
        for key in windows:
            del tables.windows[key]
        ended = [key for key, end in tables.lines.items() if end < before][:limit]
        for key in ended:
            del tables.lines[key]
        return IdleStateSwept(len(buckets), len(windows), len(ended))

    async def get_rate_limit_usage(self, instances_per_limit: int = 20) -> list[LimitUsage]:
        # On the injected clock.
        now, tables, usage = self._now(), self._limits(), []
        for name in sorted(tables.definitions):
            limit = tables.definitions[name]
            if limit.store == "redis" and limit.kind != "reservation":
                usage.append(LimitUsage(limit, name, None))
                continue
            used: dict[str, float] = {}
            if limit.kind == "token_bucket":
                assert limit.per_second is not None
                for key, bucket in tables.buckets.items():
                    if _of(limit, key):
                        elapsed = max((now - bucket.updated_at).total_seconds(), 0.0)
                        tokens = min(limit.capacity, bucket.tokens + limit.per_second * elapsed)
                        used[key] = limit.capacity - tokens
            elif limit.kind == "sliding_window":
                assert limit.span is not None
                for key, uses in tables.windows.items():
                    if _of(limit, key):
                        used[key] = float(sum(1 for at in uses if at > now - limit.span))
            else:
                for (slot_name, _), row in tables.slots.items():
                    if _of(limit, slot_name):
                        live = row.lease_expires_at is not None and row.lease_expires_at > now
                        used[slot_name] = used.get(slot_name, 0.0) + (
                            row.job_id is not None and live
                        )
            if not used:
                usage.append(LimitUsage(limit, name, 0.0))
                continue
            ranked = sorted(used.items(), key=lambda item: (-item[1], item[0]))
            usage += [LimitUsage(limit, key, value) for key, value in ranked[:instances_per_limit]]
        return usage
