"""Leaked reservation slots: slots whose lease ran out, or whose job ended without a
release, are freed."""

from __future__ import annotations

from taskq_core.worker.deps import WorkerDeps


# The shape of deadlines.py on purpose (one backend call, its count metered): each sweep keeps a
# module of its own, as the package docstring says.
class LeakedSlotSweep:
    """Frees reservation slots nobody holds any more."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """Slots freed; counted in the meters."""
        freed = await self.deps.backend.sweep_leaked_reservation_slots()
        if freed:
            self.deps.meters.leaked_slots_freed.add(freed)
        return freed
