"""Protocol members both backends derive the same way from other members, written once.

A backend part binds each as its own method (``mark_succeeded = derived.mark_succeeded``): a
plain function, so a call through the backend costs what a method defined there would. The
contracts are the protocol's; these only compute what both implementations computed alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol
from uuid import UUID

from taskq_core import jsontext
from taskq_core.backend.protocol.values import ErrorInfo, Lease
from taskq_core.backend.protocol.worker import Success
from taskq_core.constants import RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS


class _SettlesMany(Protocol):
    async def mark_succeeded_many(
        self, worker_id: UUID, successes: Sequence[Success]
    ) -> set[UUID]: ...


async def mark_succeeded(
    backend: _SettlesMany,
    lease: Lease,
    result: Any,
    *,
    fallback_result_ttl: timedelta | None = None,
    ran_for: float = 0.0,
) -> bool:
    """``mark_succeeded`` as one ``mark_succeeded_many``; the result encoded here, so an
    unstorable one raises before anything is written."""
    encoded = None if result is None else jsontext.encode(result)
    success = Success(lease.job_id, lease.attempt, encoded, fallback_result_ttl, ran_for)
    return bool(await backend.mark_succeeded_many(lease.worker_id, [success]))


def reclaim_visibility_delay(given: timedelta | None) -> timedelta:
    """``poll_reclaim_events``'s delay: the one given, else the default."""
    if given is None:
        return timedelta(seconds=RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS)
    return given


def check_stale_age(older_than: timedelta) -> None:
    """``delete_stale_workers`` refuses an age that is not positive (ValueError)."""
    if older_than <= timedelta(0):
        raise ValueError(f"older_than must be positive, got {older_than}")


def release_error(reason: str, error: ErrorInfo | None) -> ErrorInfo:
    """``release_leases``' error for a started job: the one given, else WorkerReleased."""
    return error or ErrorInfo("WorkerReleased", f"the worker gave the job back ({reason})")
