"""The fleet's queue-level picture over the store: what ``get_fleet_stats`` reports, counted from
the job records on the injected clock (one pass, so one instant)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta

from taskq_core.backend.protocol.fleet import (
    ActorFleetStats,
    FleetStats,
    QueueFleetStats,
    check_fleet_window,
    start_latency,
)
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

from .store import PENDING, RUNNING, SCHEDULED, JobRecord, MemoryStore


def _ordered(counts: Counter[JobStatus]) -> dict[JobStatus, int]:
    """Non-zero counts in JobStatus order."""
    return {status: counts[status] for status in JobStatus if counts[status]}


class FleetPart(MemoryStore):
    """``get_fleet_stats``."""

    async def get_fleet_stats(self, window: timedelta) -> FleetStats:
        check_fleet_window(window)
        now = self._now()
        since = now - window
        names = sorted({job.queue for job in self._jobs.values()} | set(self._queues))
        by_actor: dict[tuple[str, str], list[JobRecord]] = defaultdict(list)
        for job in self._jobs.values():
            by_actor[job.queue, job.actor].append(job)

        def waits(jobs: list[JobRecord]) -> list[float]:
            # Started within the window: running now, or finished within it.
            return [
                max((job.started_at - job.scheduled_at).total_seconds(), 0.0)
                for job in jobs
                if job.started_at is not None
                and job.started_at >= since
                and (job.status is RUNNING or _finished_since(job, since))
            ]

        actors: dict[str, list[ActorFleetStats]] = defaultdict(list)
        for (queue, actor), jobs in sorted(by_actor.items()):
            pending = sum(1 for job in jobs if job.status is PENDING)
            running = [job for job in jobs if job.status is RUNNING]
            finished = Counter(job.status for job in jobs if _finished_since(job, since))
            if not (pending or running or finished):
                continue
            claimed = sum(1 for job in running if job.started_at is None)
            actors[queue].append(
                ActorFleetStats(
                    queue,
                    actor,
                    pending=pending,
                    running=len(running) - claimed,
                    claimed=claimed,
                    finished=_ordered(finished),
                    latency=start_latency(waits(jobs)),
                )
            )

        queues = []
        for name in names:
            jobs = [job for job in self._jobs.values() if job.queue == name]
            members = actors.get(name, [])
            ended: Counter[JobStatus] = Counter()
            for member in members:
                ended.update(member.finished)
            queues.append(
                QueueFleetStats(
                    name=name,
                    paused=self._queue_row(name).paused,
                    pending=sum(a.pending for a in members),
                    scheduled=sum(1 for job in jobs if job.status is SCHEDULED),
                    running=sum(a.running for a in members),
                    claimed=sum(a.claimed for a in members),
                    oldest_pending_at=min(
                        (job.scheduled_at for job in jobs if job.status is PENDING), default=None
                    ),
                    finished=_ordered(ended),
                    latency=start_latency(waits(jobs)),
                    actors=members,
                )
            )
        return FleetStats(now=now, window=window, queues=queues)


def _finished_since(job: JobRecord, since: datetime) -> bool:
    """Whether the job ended (a terminal status) at or after ``since``."""
    return (
        job.status in TERMINAL_STATUSES and job.finished_at is not None and job.finished_at >= since
    )
