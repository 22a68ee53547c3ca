"""The fleet's registries: worker rows, actor configs (code-declared vs operator-owned
capacity, ``sync_actor_configs``) and queue settings (mode, capacity, pause), each operator
change recorded in the operator log with the change it made."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

# Names memory/admin.py imports too, on purpose: both implement protocol.admin.
from taskq_core.backend.protocol import (
    UNSET,
    ActorConfigDrift,
    ActorConfigRow,
    ActorConfigSyncResult,
    ActorDeclaration,
    QueueMode,
    QueueRow,
    ReadStaleness,
    WorkerInfo,
    WorkerRow,
    check_capacity,
    check_queue_update,
)
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.admin_rules import (
    CAPACITY_FIELDS,
    acknowledgement_detail,
    capacity_changes,
    queue_changes,
)

from . import bulk, rows
from .core import BackendCore, one_on


def _change(value: object) -> tuple[bool, object]:
    """An optional write argument as its statement's (changed?, value) pair: UNSET leaves
    the column as it is."""
    return (False, None) if value is UNSET else (True, value)


# Mirrors memory/admin.py on purpose: both implement protocol.admin, so each method restates its
# signature (mypy checks the match).
class RegistryPart(BackendCore):
    """Workers, actor configs and queues."""

    # --- workers and leadership --------------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> None:
        await self._pool.execute(
            self._queries["register_worker"],
            info.id,
            info.hostname,
            info.pid,
            info.label,
            info.workgroup_instance,
            list(info.queues),
            list(info.actors),
            info.concurrency,
            info.version,
        )

    async def mark_worker_stopped(self, worker_id: UUID) -> None:
        await self._pool.execute(self._queries["mark_worker_stopped"], worker_id)

    async def list_workers(self) -> list[WorkerRow]:
        return [rows.worker(r) for r in await self._pool.fetch(self._queries["list_workers"])]

    async def get_read_staleness(self) -> ReadStaleness | None:
        row = await self._pool.fetchrow(self._queries["read_staleness"])
        assert row is not None  # one row, always
        if not row["standby"]:
            return None
        return ReadStaleness(row["behind"], row["streaming"], row["last_replayed_at"])

    async def mark_worker_exited(
        self, worker_id: UUID, exit_code: int | None, exit_signal: str | None
    ) -> bool:
        found = await self._pool.fetchval(
            self._queries["mark_worker_exited"], worker_id, exit_code, exit_signal
        )
        return found is not None

    async def mark_worker_acknowledged(
        self, worker_id: UUID, last_seen_at: datetime, audit: Audit
    ) -> bool:
        acknowledged = await self._pool.fetchval(
            self._queries["mark_worker_acknowledged"],
            worker_id,
            last_seen_at,
            audit.by,
            audit.reason,
            bulk.dumps(acknowledgement_detail(last_seen_at)),
        )
        return bool(acknowledged)

    # --- actor config ------------------------------------------------------------------------
    async def sync_actor_configs(
        self, declared: Sequence[ActorDeclaration], *, force: bool
    ) -> ActorConfigSyncResult:
        # One statement, so one transaction.
        if not declared:
            return ActorConfigSyncResult([], [], [], overwritten=False)
        metadata = [json.loads(bulk.dumps(d.metadata)) for d in declared]  # jsonb-normalized
        records = await self._pool.fetch(
            self._queries["sync_actor_configs"],
            [d.actor for d in declared],
            [d.queue for d in declared],
            [bulk.dumps(m) for m in metadata],
            [d.max_concurrent for d in declared],
            [d.max_pending for d in declared],
            [d.result_ttl for d in declared],
            force,
            [d.retry_kind for d in declared],
            [d.max_attempts for d in declared],
            [d.retry_time_budget for d in declared],
            [d.priority for d in declared],
        )
        created: list[str] = []
        overrides: list[tuple[str, str, Any, Any]] = []
        drift: list[ActorConfigDrift] = []
        for decl, wanted_metadata, record in zip(declared, metadata, records, strict=True):
            if record["created"]:
                if decl.actor not in created:
                    created.append(decl.actor)
                continue
            if not record["existed"]:
                continue  # created concurrently by another worker: nothing of ours to compare
            for name in CAPACITY_FIELDS:
                stored, wanted = record[f"stored_{name}"], getattr(decl, name)
                if stored != wanted:
                    overrides.append((decl.actor, name, stored, wanted))
            if record["stored_queue"] != decl.queue:
                drift.append(
                    ActorConfigDrift(decl.actor, "queue", record["stored_queue"], decl.queue)
                )
            if record["stored_metadata"] != wanted_metadata:
                drift.append(
                    ActorConfigDrift(
                        decl.actor, "metadata", record["stored_metadata"], wanted_metadata
                    )
                )
        return ActorConfigSyncResult(created, overrides, drift, overwritten=force and bool(drift))

    async def list_actor_configs(self) -> list[ActorConfigRow]:
        records = await self._pool.fetch(self._queries["list_actor_configs"])
        return [rows.actor_config(r) for r in records]

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        record = await self._pool.fetchrow(self._queries["get_actor_config"], actor)
        return None if record is None else rows.actor_config(record)

    async def update_actor_config(
        self,
        actor: str,
        *,
        max_concurrent: int | None = UNSET,
        max_pending: int | None = UNSET,
        result_ttl: timedelta | None = UNSET,
        audit: Audit | None = None,
    ) -> ActorConfigRow | None:
        # The change and its operator log entry commit together.
        check_capacity(max_concurrent=max_concurrent, max_pending=max_pending)
        async with self._pool.acquire() as conn, conn.transaction():
            before = await conn.fetchrow(self._queries["lock_actor_config"], actor)
            if before is None:
                return None
            record = await one_on(
                conn,
                self._queries["update_actor_config"],
                actor,
                *_change(max_concurrent),
                *_change(max_pending),
                *_change(result_ttl),
                self._wake_channel,
            )
            after = rows.actor_config(record)
            if audit is not None:
                changed = capacity_changes(rows.actor_config(before), after)
                await self._log_operator(
                    conn, "actor_config_set", actor, audit, {"changed": changed}
                )
        return after

    # --- queues ------------------------------------------------------------------------------
    async def list_queues(self) -> list[QueueRow]:
        return [rows.queue(r) for r in await self._pool.fetch(self._queries["list_queues"], None)]

    # Alike get_actor_config and update_actor_config above by shape only: a row by its key,
    # then its update, for another table.
    async def get_queue(self, name: str) -> QueueRow | None:
        record = await self._pool.fetchrow(self._queries["list_queues"], name)
        return None if record is None else rows.queue(record)

    async def update_queue(
        self,
        name: str,
        *,
        mode: QueueMode = UNSET,
        max_concurrent: int | None = UNSET,
        paused: bool = UNSET,
        paused_by: str | None = None,
        pause_reason: str | None = None,
        audit: Audit | None = None,
    ) -> QueueRow:
        check_queue_update(mode, max_concurrent)
        async with self._pool.acquire() as conn, conn.transaction():
            before = None
            if audit is not None:
                found = await conn.fetchrow(self._queries["list_queues"], name)
                before = None if found is None else rows.queue(found)
            record = await one_on(
                conn,
                self._queries["update_queue"],
                name,
                *_change(mode),
                *_change(max_concurrent),
                *_change(paused if paused is UNSET else bool(paused)),
                self._wake_channel,
                paused_by,
                pause_reason,
            )
            if audit is not None:
                changed = queue_changes(before, rows.queue(record))
                await self._log_operator(conn, "queue_update", name, audit, {"changed": changed})
        return rows.queue(record)
