"""Stranded queues: queues with waiting jobs that no live worker consumes are warned about."""

from __future__ import annotations

from datetime import timedelta

from taskq_core.liveness import worker_is_alive, worker_stale_after
from taskq_core.worker.deps import WorkerDeps


class StrandedQueues:
    """Warns about queues with waiting jobs that no live worker consumes."""

    def __init__(self, deps: WorkerDeps, *, stale_after: timedelta | None = None) -> None:
        self.deps = deps
        # liveness.worker_stale_after: explain's and top's too
        self.stale_after = stale_after or worker_stale_after(deps.settings)

    async def run_once(self) -> list[str]:
        """Names of stranded queues (also logged)."""
        backend = self.deps.backend
        # One index probe per queue, not a count over the whole jobs table.
        waiting = set(await backend.list_waiting_queues())
        if not waiting:
            return []
        now = self.deps.clock.now()
        consumed: set[str] = set()
        for worker in await backend.list_workers():
            if worker_is_alive(worker, now, self.stale_after):
                consumed.update(worker.queues)
        stranded = sorted(waiting - consumed)
        if stranded:
            self.deps.log.warning(
                "stranded_queues",
                queues=stranded,
                note="jobs wait in queues no live worker consumes",
            )
        return stranded
