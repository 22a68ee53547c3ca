"""The ``sweeps`` loop: the short lease and cleanup passes that run every
TASKQ_SWEEP_INTERVAL, in order, each on its own.

In order: reclaim expired leases, fail missed deadlines, clear expired results, free leaked
reservation slots, end stale batches (after the reclaim and the deadlines, whose children had no
worker to run the batch hook), decide workflow steps no hook decided (the same), delete idle
limiter state (every few minutes only). A pass that fails does not skip the ones after it: its
error is logged (``sweep_pass_failed``) and, once the others ran, the first one is raised to the
loop (``leader.run_gated``), which retries after a transient error and ends the worker after
five unexpected ones in a row, as for any leader loop. The database being away stops the pass at
once: nothing else would answer either. One ``sweep_ran`` line says what the pass changed, when
it changed anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskq_core.errors import DatabaseUnavailableError
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.deadlines import DeadlineSweep
from taskq_core.worker.sweeps.leaked_slots import LeakedSlotSweep
from taskq_core.worker.sweeps.limiter_state import IdleLimiterStateSweep
from taskq_core.worker.sweeps.reclaim import ReclaimExpiredLeases
from taskq_core.worker.sweeps.result_expiry import ResultExpiry
from taskq_core.worker.sweeps.stale_batches import StaleBatchCompletion
from taskq_core.worker.sweeps.stale_workflows import StaleWorkflowRelease


@dataclass(frozen=True)
class SweepResult:
    """What one pass of the ``sweeps`` loop changed (0 for a pass that failed)."""

    reclaimed: int
    deadline_failed: int
    results_expired: int
    reservation_slots_freed: int = 0
    batches_completed: int = 0
    workflow_steps_decided: int = 0
    idle_limiter_keys_deleted: int = 0


class MaintenanceSweep:
    """Runs the passes of the ``sweeps`` loop; each field of SweepResult is one pass."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "sweeps") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it
        self.reclaim = ReclaimExpiredLeases(deps)
        stale_batches = StaleBatchCompletion(deps, beat=beat)
        # (SweepResult field, one pass returning that count), in the order they run.
        self.passes: tuple[tuple[str, Callable[[], Awaitable[int]]], ...] = (
            ("reclaimed", self.reclaim.run_once),
            ("deadline_failed", DeadlineSweep(deps).run_once),
            ("results_expired", ResultExpiry(deps, beat=beat).run_once),
            ("reservation_slots_freed", LeakedSlotSweep(deps).run_once),
            ("batches_completed", lambda: _count(stale_batches.run_once())),
            ("workflow_steps_decided", StaleWorkflowRelease(deps).run_once),
            ("idle_limiter_keys_deleted", IdleLimiterStateSweep(deps, beat=beat).run_once),
        )

    def reclaim_allowed(self) -> bool:
        """Whether expired leases may be taken from their workers now."""
        return self.reclaim.allowed()

    async def run_once(self) -> SweepResult:
        """One pass of every sweep; raises the first error any of them raised, after the
        others ran."""
        counts: dict[str, int] = {}
        failures: list[Exception] = []
        for field, sweep in self.passes:
            try:
                counts[field] = await sweep()
            except DatabaseUnavailableError:
                raise
            except Exception as exc:
                self.deps.log.warning("sweep_pass_failed", sweep=field, error=repr(exc))
                failures.append(exc)
        result = SweepResult(**{field: counts.get(field, 0) for field, _ in self.passes})
        if any(counts.values()):
            self.deps.log.info("sweep_ran", **vars(result))
        if failures:
            raise failures[0]
        return result


async def _count(ended: Awaitable[list[Any]]) -> int:
    return len(await ended)
