"""Result expiry: stored results past their ``result_ttl`` are cleared, in bounded batches."""

from __future__ import annotations

from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import batch_beat


class ResultExpiry:
    """Clears expired results; each committed batch ticks loop ``beat``."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "sweeps") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it

    async def run_once(self) -> int:
        """Results cleared; counted in the meters."""
        expired = await self.deps.backend.expire_results(on_batch=batch_beat(self.deps, self.beat))
        if expired:
            self.deps.meters.results_expired.add(expired)
        return expired
