"""Stale workflow steps: waiting steps whose dependencies allow them, and running workflows
whose steps all ended, decided by the leader.

The worker's hook decides a step's dependents right after its terminal write committed; this
pass catches what no hook saw: a step ended by an operator, a reclaim or a deadline, or by a
worker that died between its write and its hook.
"""

from __future__ import annotations

from taskq_core.worker.deps import WorkerDeps

# Waiting steps (and running workflows) one release pass decides; the sweep repeats until a
# pass moves nothing.
STALE_STEPS_PER_CALL = 1000


class StaleWorkflowRelease:
    """Releases or cancels waiting steps nothing else decided and ends finished workflows."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """How many steps were released or cancelled and workflows ended; each workflow end
        logged (``stale_workflow_ended``)."""
        changed = 0
        while True:
            release = await self.deps.backend.release_stale_workflow_steps(STALE_STEPS_PER_CALL)
            for workflow_id, status in release.ended:
                self.deps.log.info(
                    "stale_workflow_ended", workflow_id=str(workflow_id), status=status.value
                )
            moved = release.released + release.cancelled + len(release.ended)
            changed += moved
            if moved == 0:
                return changed
