"""ParentWatch: a workgroup child notices that its supervisor is gone and shuts down.

On Linux the supervisor has the kernel SIGTERM its children when it dies (``PR_SET_PDEATHSIG``,
see ``taskq_core.supervisor.parent_death``); this loop is the portable fallback. Once a second
it compares ``os.getppid()`` with the supervisor's pid read when the worker started: an orphan
is re-parented (to init or a subreaper), so a different parent means the supervisor is gone.
The worker then logs ``supervisor_gone`` and begins the same graceful shutdown a SIGTERM starts
(exit 0, its worker row marked stopped).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.waits import wait_any

CHECK_INTERVAL = 1.0
LOOP_NAME = "parent_watch"


class ParentWatch:
    """Requests a shutdown once the process that started this worker is no longer its parent."""

    # Plain field assignments, alike the constructors of HookPipe, Completer, LoopLagWatchdog,
    # EnqueuePlanner and FallbackLimiterStore by shape only: other data.
    def __init__(
        self,
        deps: WorkerDeps,
        parent_pid: int,
        request_shutdown: Callable[[str], None],
        *,
        getppid: Callable[[], int] = os.getppid,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self.deps = deps
        self.parent_pid = parent_pid
        self.request_shutdown = request_shutdown
        self._getppid = getppid
        self.interval = interval

    def run_once(self) -> bool:
        """One check; True when the parent is gone (this process has another parent now)."""
        return self._getppid() != self.parent_pid

    async def run(self) -> None:
        """Check every ``interval`` until shutdown; request it when the parent is gone."""
        deps = self.deps
        try:
            while not deps.state.shutdown_event.is_set():
                deps.liveness.tick(LOOP_NAME, period=self.interval)
                if self.run_once():
                    deps.log.warning(
                        "supervisor_gone", parent_pid=self.parent_pid, new_parent=self._getppid()
                    )
                    deps.liveness.forget(LOOP_NAME)  # done watching: not a stalled loop
                    self.request_shutdown("supervisor_gone")
                    break
                await wait_any(deps.state.shutdown_event, timeout=self.interval)
            await (
                deps.state.shutdown_event.wait()
            )  # a sibling returns only once shutdown is under way
        finally:
            deps.liveness.forget(LOOP_NAME)
