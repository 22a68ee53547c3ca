"""ActorConfig sync: the code declares actors, operators own their capacity.

At worker start every registered actor is written to ``actor_config``: missing rows are
created from the ``@actor`` literals; stored capacity (max_concurrent, max_pending,
result_ttl) always wins and a differing literal is only logged; structural fields (queue,
metadata) that differ are drift, which refuses the start unless forced. The retry policy and
priority are the code's and written every time, so a by-name enqueue from a process without
the actor's code gets them (``backend.protocol.values.stored_retry``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import (
    ActorConfigDrift,
    ActorConfigRow,
    ActorConfigSyncResult,
    ActorDeclaration,
    Backend,
)
from taskq_core.errors import ActorConfigDriftError

# The fields every worker start rewrites from the code (never drift, never operator-owned).
CODE_OWNED_FIELDS = frozenset({"retry_kind", "max_attempts", "retry_time_budget", "priority"})


def declaration(ref: ActorRef) -> ActorDeclaration:
    """What the code says about one actor."""
    return ActorDeclaration(
        actor=ref.name,
        queue=ref.queue,
        metadata=dict(ref.metadata),
        max_concurrent=ref.max_concurrent,
        max_pending=ref.max_pending,
        result_ttl=ref.result_ttl,
        retry_kind=ref.retry.kind,
        max_attempts=ref.retry.max_attempts,
        retry_time_budget=ref.retry.time_budget,
        priority=ref.priority,
    )


def describe_drift(drift: Iterable[ActorConfigDrift]) -> str:
    """Drift as one line: ``actor.field: stored X, code Y; ...``."""
    return "; ".join(
        f"{d.actor}.{d.field}: stored {d.stored!r}, code {d.declared!r}" for d in drift
    )


async def sync_actor_configs(
    backend: Backend, refs: Iterable[ActorRef], *, force: bool, log: Any
) -> ActorConfigSyncResult:
    """Sync every actor; raise ActorConfigDriftError on structural drift unless ``force``."""
    result = await backend.sync_actor_configs([declaration(r) for r in refs], force=force)
    for actor, field, stored, declared in result.capacity_overrides:
        log.info(
            "actor_config_capacity_override",
            actor=actor,
            field=field,
            stored=stored,
            declared=declared,
        )
    if result.drift and not force:
        raise ActorConfigDriftError(
            f"actor config drift ({describe_drift(result.drift)}); re-run with "
            "--force-update-actor-config to overwrite the stored values"
        )
    for drift in result.drift:
        log.error(
            "actor_config_drift_overwrite",
            actor=drift.actor,
            field=drift.field,
            stored=drift.stored,
            declared=drift.declared,
            force=True,
        )
    return result


def diff_against_code(
    rows: Iterable[ActorConfigRow], refs: Iterable[ActorRef]
) -> list[dict[str, Any]]:
    """Field-by-field differences between stored rows and code (for `actor-config diff`)."""
    stored = {row.actor: row for row in rows}
    differences: list[dict[str, Any]] = []
    for ref in refs:
        row = stored.get(ref.name)
        if row is None:
            differences.append({"actor": ref.name, "field": "*", "stored": None, "code": "new"})
            continue
        pairs = {
            "queue": (row.queue, ref.queue),
            "metadata": (row.metadata, dict(ref.metadata)),
            "max_concurrent": (row.max_concurrent, ref.max_concurrent),
            "max_pending": (row.max_pending, ref.max_pending),
            "result_ttl": (row.result_ttl, ref.result_ttl),
            # Code-owned: the next worker start writes these (CODE_OWNED_FIELDS).
            "retry_kind": (row.retry_kind, ref.retry.kind),
            "max_attempts": (row.max_attempts, ref.retry.max_attempts),
            "retry_time_budget": (row.retry_time_budget, ref.retry.time_budget),
            "priority": (row.priority, ref.priority),
        }
        for field, (stored_value, code_value) in pairs.items():
            if stored_value != code_value:
                differences.append(
                    {"actor": ref.name, "field": field, "stored": stored_value, "code": code_value}
                )
    return differences
