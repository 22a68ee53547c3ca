"""Rules every admin implementation shares, so both backends agree: the argument checks of
the admin calls, the operator log's documents of a change, and an operator's forced end
written as an error.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from taskq_core.backend.protocol.admin import (
    OPERATOR_FAILED,
    OPERATOR_REQUEUED,
    RECENT_JOBS_MAX,
    Audit,
    ForcedEnd,
    QueueRow,
)
from taskq_core.backend.protocol.values import UNSET, ActorConfigRow, JobFilter, QueueMode
from taskq_core.statemachine import JobStatus


def forced_end_error(end: ForcedEnd, audit: Audit) -> tuple[str, str]:
    """(error class, message) of an operator's requeue or fail: ``requeued by alice@ops-1:
    the worker hangs``, the same on every backend."""
    verb = "requeued" if end == "requeue" else "failed"
    message = f"{verb} by {audit.by or 'an operator'}"
    if audit.reason:
        message += f": {audit.reason}"
    return (OPERATOR_REQUEUED if end == "requeue" else OPERATOR_FAILED), message


def filter_document(filter: JobFilter) -> dict[str, Any]:
    """A bulk write's filter as its operator log entry records it."""
    statuses = filter.statuses()
    return {
        "statuses": None if statuses is None else [s.value for s in JobStatus if s in statuses],
        "queue": filter.queue,
        "actor": filter.actor,
        "ids": None if filter.ids is None else [str(i) for i in filter.ids],
        "limit": filter.limit,
    }


# The capacity fields of an actor config an operator owns once set.
CAPACITY_FIELDS = ("max_concurrent", "max_pending", "result_ttl")


def capacity_changes(before: ActorConfigRow, after: ActorConfigRow) -> dict[str, Any]:
    """``{field: {"from", "to"}}`` of the capacity fields an actor-config change changed
    (result_ttl in seconds), as its operator log entry records them."""

    def shown(value: Any) -> Any:
        return value.total_seconds() if isinstance(value, timedelta) else value

    return {
        name: {"from": shown(getattr(before, name)), "to": shown(getattr(after, name))}
        for name in CAPACITY_FIELDS
        if getattr(before, name) != getattr(after, name)
    }


def queue_changes(before: QueueRow | None, after: QueueRow) -> dict[str, Any]:
    """``{field: {"from", "to"}}`` of the settings a queue update changed (a queue without a
    row has the defaults), as its operator log entry records them."""

    def settings(row: QueueRow | None) -> dict[str, Any]:
        if row is None:
            return {"mode": "strict_fifo", "max_concurrent": None, "paused": False}
        return {"mode": row.mode, "max_concurrent": row.max_concurrent, "paused": row.paused}

    old, new = settings(before), settings(after)
    return {k: {"from": old[k], "to": v} for k, v in new.items() if old[k] != v}


def acknowledgement_detail(last_seen_at: datetime) -> dict[str, Any]:
    """The operator log detail of a worker's acknowledged silence: when it was last seen."""
    return {"last_seen_at": last_seen_at.isoformat()}


def check_dashboard_window(window: timedelta, minutes: int) -> None:
    """Validate ``get_dashboard_stats`` arguments the same way in every implementation."""
    if window <= timedelta(0):
        raise ValueError(f"window must be positive, got {window}")
    if not 1 <= minutes <= 1440:
        raise ValueError(f"minutes must be between 1 and 1440, got {minutes}")


def check_recent_limit(filter: JobFilter) -> None:
    """Validate a ``list_recent_jobs`` filter: no ids, a limit of at most RECENT_JOBS_MAX."""
    if filter.ids is not None:
        raise ValueError("list_recent_jobs does not filter by ids; use list_jobs")
    if filter.limit is None or filter.limit > RECENT_JOBS_MAX:
        raise ValueError(
            f"list_recent_jobs returns at most {RECENT_JOBS_MAX} rows, got limit={filter.limit}"
        )


_QUEUE_MODES = frozenset({"strict_fifo", "round_robin"})


def check_queue_update(mode: QueueMode, max_concurrent: int | None) -> None:
    """Validate ``update_queue`` arguments the same way in every implementation."""
    if mode is not UNSET and mode not in _QUEUE_MODES:
        raise ValueError(f"unknown queue mode {mode!r} (valid: round_robin, strict_fifo)")
    check_capacity(max_concurrent=max_concurrent)


def check_capacity(**limits: int | None) -> None:
    """Validate capacity limits (``max_concurrent``, ``max_pending``) of an update: UNSET
    leaves a field and None clears it; a set limit must not be negative."""
    for name, value in limits.items():
        if value is not UNSET and value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
