"""Stale batches: active batches with no child left to wait for are ended.

The children a reclaim or a deadline failed had no worker to run the batch hook, nor had a
child cancelled by an operator, one whose worker died before its hook, or an empty batch.
"""

from __future__ import annotations

from taskq_core.backend.protocol.batches import BatchTransition
from taskq_core.obs.metrics import count_batch_end
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import batch_beat

# Batches one complete_stale_batches statement ends; the sweep repeats until a short answer.
STALE_BATCHES_PER_CALL = 100


class StaleBatchCompletion:
    """Ends every active batch whose children are all terminal (its finalizer was enqueued
    with it), STALE_BATCHES_PER_CALL a call; each committed call ticks loop ``beat``."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "sweeps") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it

    async def run_once(self) -> list[BatchTransition]:
        """The batches ended, each logged (``stale_batch_completed``) and counted."""
        ended: list[BatchTransition] = []
        while True:
            batch = await self.deps.backend.complete_stale_batches(STALE_BATCHES_PER_CALL)
            for transition in batch:
                self._record(transition)
            ended.extend(batch)
            if len(batch) < STALE_BATCHES_PER_CALL:
                return ended
            batch_beat(self.deps, self.beat)(len(batch))

    def _record(self, transition: BatchTransition) -> None:
        count_batch_end(self.deps.meters, transition.status.value, "sweep")
        finalizer = transition.finalizer_job_id
        self.deps.log.info(
            "stale_batch_completed",
            batch_id=str(transition.batch_id),
            status=transition.status.value,
            finalizer_job_id=None if finalizer is None else str(finalizer),
        )
