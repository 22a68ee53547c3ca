"""The workgroup's health check: each child's heartbeat read from its ``workers`` rows.

A child whose heartbeat has not moved for ``stale_after`` (or that never registered within
``start_timeout``) is killed with SIGKILL and then handled as any exit. A failed or slow
query counts as a failed observation for every watched child, never as a stale one.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Sequence

from taskq_core.backend.protocol import WorkerRow
from taskq_core.clock import Clock
from taskq_core.supervisor.policy import is_stale, observation_failed, observe_heartbeat
from taskq_core.supervisor.slots import ChildSlot, Emit
from taskq_core.supervisor.status import ChildState

# A health query that takes longer than this counts as failed: the loop must keep reaping.
HEALTH_QUERY_TIMEOUT = 5.0

HealthSource = Callable[[], Awaitable[Sequence[WorkerRow]]]


def is_watched(slot: ChildSlot, source: HealthSource | None) -> bool:
    """Whether the slot's child is health-checked now."""
    return (
        source is not None
        and slot.plan.health.enabled
        and slot.state is ChildState.RUNNING
        and slot.process is not None
        and not slot.stale_killed
    )


async def check_health(
    slots: Sequence[ChildSlot],
    source: HealthSource | None,
    *,
    clock: Clock,
    hostname: str,
    instance: str,
    emit: Emit,
) -> None:
    """Observe the heartbeats of the children due a check; kill the stale ones."""
    now = clock.monotonic()
    watched = [slot for slot in slots if is_watched(slot, source)]
    due = [slot for slot in watched if slot.next_check_at <= now]
    if not due or source is None:
        return
    try:
        rows = await asyncio.wait_for(source(), HEALTH_QUERY_TIMEOUT)
    except Exception as exc:
        now = clock.monotonic()
        emit("health_check_failed", "warning", error=str(exc) or type(exc).__name__)
        for slot in watched:
            slot.watch = observation_failed(slot.watch, now=now)
            slot.next_check_at = now + slot.plan.health.check_interval
        return
    now = clock.monotonic()
    latest: dict[int, WorkerRow] = {}
    for row in rows:
        if row.hostname != hostname or row.workgroup_instance != instance:
            continue
        if row.pid not in latest or row.last_seen_at > latest[row.pid].last_seen_at:
            latest[row.pid] = row
    for slot in due:
        if slot.process is None or slot.state is not ChildState.RUNNING:
            continue  # exited, or the group began stopping while the query ran
        found = latest.get(slot.process.pid)
        if found is not None:
            slot.last_seen_at = found.last_seen_at
        slot.watch = observe_heartbeat(slot.watch, found.last_seen_at if found else None, now=now)
        slot.next_check_at = now + slot.plan.health.check_interval
        health = slot.plan.health
        if is_stale(
            slot.watch,
            now=now,
            stale_after=health.stale_after,
            start_timeout=health.start_timeout,
        ):
            _kill_stale(slot, now, emit)


def _kill_stale(slot: ChildSlot, now: float, emit: Emit) -> None:
    assert slot.process is not None
    slot.stale_killed = True
    emit(
        "child_stale_killed",
        "warning",
        label=slot.plan.label,
        spec=slot.plan.spec,
        pid=slot.process.pid,
        last_seen_at=slot.watch.last_seen_at.isoformat() if slot.watch.last_seen_at else None,
        registered=slot.watch.last_seen_at is not None,
        unchanged_for=round(now - slot.watch.moved_at, 3),
    )
    slot.process.signal(signal.SIGKILL)
