"""The fleet's queue-level picture on PostgreSQL (sql/fleet.sql): three index-backed statements
in one read-only REPEATABLE READ transaction, so the counts agree with each other and every
window is measured from one instant."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta

import asyncpg

from taskq_core.backend.protocol.fleet import (
    LATENCY_PERCENTILES,
    ActorFleetStats,
    FleetStats,
    QueueFleetStats,
    StartLatency,
    check_fleet_window,
)
from taskq_core.statemachine import JobStatus

from .core import BackendCore


def _latency(record: asyncpg.Record) -> StartLatency | None:
    """The start latency columns of a ``fleet_finished`` record (None: nothing started)."""
    if not record["started"]:
        return None
    values: Sequence[float] = record["percentiles"]
    return StartLatency(
        started=record["started"],
        mean=float(record["mean"]),
        percentiles=dict(zip(LATENCY_PERCENTILES, values, strict=True)),
        longest=float(record["longest"]),
    )


def _finished(record: asyncpg.Record) -> dict[JobStatus, int]:
    return {
        JobStatus(status): count
        for status, count in zip(record["statuses"], record["counts"], strict=True)
    }


def _sum_finished(actors: Sequence[ActorFleetStats]) -> dict[JobStatus, int]:
    """The actors' finished counts added up, in JobStatus order."""
    total: dict[JobStatus, int] = {}
    for status in JobStatus:
        count = sum(actor.finished.get(status, 0) for actor in actors)
        if count:
            total[status] = count
    return total


class FleetPart(BackendCore):
    """``get_fleet_stats``."""

    async def get_fleet_stats(self, window: timedelta) -> FleetStats:
        check_fleet_window(window)
        queries = self._queries
        async with (
            self._pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            now = await conn.fetchval(queries["fleet_clock"])
            queue_records = await conn.fetch(queries["fleet_queues"])
            actor_records = await conn.fetch(queries["fleet_actors"])
            finished_records = await conn.fetch(queries["fleet_finished"], window)

        active = {(r["queue"], r["actor"]): r for r in actor_records}
        ended = {(r["queue"], r["actor"]): r for r in finished_records if r["actor"] is not None}
        queue_latency = {r["queue"]: _latency(r) for r in finished_records if r["actor"] is None}
        by_queue: dict[str, list[ActorFleetStats]] = defaultdict(list)
        for queue, actor in sorted(active.keys() | ended.keys()):
            counts, finished = active.get((queue, actor)), ended.get((queue, actor))
            by_queue[queue].append(
                ActorFleetStats(
                    queue,
                    actor,
                    pending=0 if counts is None else counts["pending"],
                    running=0 if counts is None else counts["running"],
                    claimed=0 if counts is None else counts["claimed"],
                    finished={} if finished is None else _finished(finished),
                    latency=None if finished is None else _latency(finished),
                )
            )
        queues = []
        for record in queue_records:
            name = record["name"]
            members = by_queue.get(name, [])
            queues.append(
                QueueFleetStats(
                    name=name,
                    paused=record["paused"],
                    pending=sum(a.pending for a in members),
                    scheduled=record["scheduled"],
                    running=sum(a.running for a in members),
                    claimed=sum(a.claimed for a in members),
                    oldest_pending_at=record["oldest_pending_at"],
                    finished=_sum_finished(members),
                    latency=queue_latency.get(name),
                    actors=members,
                )
            )
        return FleetStats(now=now, window=window, queues=queues)
