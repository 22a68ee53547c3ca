"""LeaderSampler: the leader's read of the fleet for the gauges, every 15 seconds.

Jobs per queue and status (``taskq.queue.depth``) and reservation slots held per reservation
(``taskq.reservation.slots_held``), kept on ``deps.state.leader_sample`` where ``obs.gauges``
reports them while this worker leads. One worker samples for the whole fleet, so a dashboard
sums nothing twice. The depths come from ``get_dashboard_stats``, which walks indexes only
(cheap on a large table); nothing is read while no meter provider is installed.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from taskq_core.obs.gauges import LeaderSample
from taskq_core.obs.metrics import meter_installed
from taskq_core.worker.deps import WorkerDeps

LEADER_SAMPLE_INTERVAL = 15.0
# get_dashboard_stats also counts the jobs finished within a window; the sample uses none of it.
_FINISHED_WINDOW = timedelta(seconds=LEADER_SAMPLE_INTERVAL)


class LeaderSampler:
    """One sample per ``run_once``."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> LeaderSample | None:
        """Read the depths and the held slots; None (and no read) without a meter provider."""
        deps = self.deps
        if not meter_installed():
            deps.state.leader_sample = None
            return None
        stats = await deps.backend.get_dashboard_stats(_FINISHED_WINDOW, 1)
        depths: dict[tuple[str, str], int] = {}
        for queue in stats.queues:
            depths[(queue.name, "pending")] = queue.pending
            depths[(queue.name, "scheduled")] = queue.scheduled
            depths[(queue.name, "claimed")] = queue.claimed
            depths[(queue.name, "running")] = queue.running
        held = Counter(slot.name for slot in await deps.backend.list_held_reservation_slots())
        sample = LeaderSample(depths, dict(held))
        deps.state.leader_sample = sample
        return sample
