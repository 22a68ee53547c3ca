"""Prune: terminal jobs past their retention move to the archive, then ended batch rows past
the longest retention go; under the ``taskq:prune`` lock (a second leader, or an operator's
``taskq prune``, skips)."""

from __future__ import annotations

from datetime import timedelta

from taskq_core.backend.protocol.retention import PrunePolicy, PruneResult
from taskq_core.constants import PRUNE_LOCK
from taskq_core.obs.metrics import labels
from taskq_core.retention import prune_policy
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import batch_beat


def batch_retention(policy: PrunePolicy) -> timedelta:
    """How long an ended batch row stays: the longest retention of any terminal status."""
    return max(policy.retention.values())


def _by_status_and_queue(result: PruneResult) -> dict[str, dict[str, int]]:
    """``{status: {queue: jobs}}``: the moved counts as a log line (JSON) reads them."""
    counts: dict[str, dict[str, int]] = {}
    for (status, queue), moved in sorted(result.moved.items()):
        counts.setdefault(status.value, {})[queue] = moved
    return counts


class PruneSweep:
    """Archives terminal jobs past their retention (TASKQ_PRUNE_*), at the fire times of the
    prune schedule; each committed batch ticks loop ``beat``."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "prune") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name each committed batch ticks

    async def run_once(self) -> PruneResult | None:
        """Prune with the settings' policy; None when another holder had the lock."""
        deps = self.deps
        policy = prune_policy(deps.settings)
        started = deps.clock.monotonic()
        async with deps.backend.sweep_lock(PRUNE_LOCK) as got:
            if not got:
                deps.log.info("prune_skipped", lock=PRUNE_LOCK, reason="another prune is running")
                return None
            result = await deps.backend.prune_jobs(policy, on_batch=batch_beat(deps, self.beat))
            for (status, queue), moved in result.moved.items():
                attributes = {"taskq.job.status": status.value, "messaging.destination.name": queue}
                deps.meters.pruned_jobs.add(moved, labels(**attributes))
            deps.log.info(
                "prune_ran",
                moved=_by_status_and_queue(result),
                total=result.total,
                batches=result.batches,
                batch_size=policy.batch_size,
                seconds=round(deps.clock.monotonic() - started, 3),
            )
            # After the jobs: a batch row goes only once no child of it is left in jobs.
            await self.prune_batches(policy)
        return result

    async def prune_batches(self, policy: PrunePolicy) -> int:
        """Delete ended batch rows past the longest retention of ``policy`` (a batch outlives
        every child the prune keeps); logs and returns how many."""
        deps = self.deps
        older_than = batch_retention(policy)
        deleted = await deps.backend.prune_old_batches(older_than)
        if deleted:
            deps.meters.pruned_batches.add(deleted)
        deps.log.info(
            "batches_pruned", deleted=deleted, older_than_seconds=older_than.total_seconds()
        )
        return deleted
