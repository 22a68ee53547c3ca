"""Missed deadlines: jobs past their ``schedule_to_close`` fail."""

from __future__ import annotations

from taskq_core.worker.deps import WorkerDeps


# The shape of leaked_slots.py on purpose (one backend call, its count metered): each sweep keeps a
# module of its own, as the package docstring says.
class DeadlineSweep:
    """Fails the jobs whose deadline passed before they finished."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """Jobs failed; counted in the meters."""
        failed = await self.deps.backend.fail_overdue_jobs()
        if failed:
            self.deps.meters.deadline_failed.add(failed)
        return failed
