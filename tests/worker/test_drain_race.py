"""The until-idle check and a job that comes and goes while the database answers it: the
store may have read that job terminal before what its end causes was written (a batch's
finalizer, enqueued by the hook after the child's success committed), so the check counts
the worker busy and looks again."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import cast
from uuid import uuid4

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import JobRow
from taskq_core.clock import FakeClock
from taskq_core.constants import EXIT_OK
from taskq_core.worker.active import ActiveJobs
from taskq_core.worker.drain import DrainMonitor
from tests.worker.sweep_support import MIDNIGHT, memory_deps


class ClaimsWhileAnswering(InMemoryBackend):
    """Answers "nothing active" after a job was claimed and released meanwhile."""

    holdings: ActiveJobs | None = None

    async def has_active_jobs(self, queues: Sequence[str]) -> bool:
        if self.holdings is not None:
            row = cast(JobRow, SimpleNamespace(id=uuid4(), locked_by_worker=uuid4(), attempt=1))
            held, _ = self.holdings.claim(row, renewed_at=0.0)
            self.holdings.remove(held)
            self.holdings = None  # once
        return await super().has_active_jobs(queues)


def noop(reason: str) -> None:
    del reason


async def test_a_job_claimed_and_released_during_the_check_keeps_the_worker_busy() -> None:
    clock = FakeClock(MIDNIGHT)
    backend = ClaimsWhileAnswering(clock=clock)
    deps = memory_deps(clock, backend, idle_settle_window=0.0)
    backend.holdings = deps.active
    monitor = DrainMonitor(deps, noop)
    assert await monitor.run_once() is None  # something happened: look again
    assert await monitor.run_once() == EXIT_OK  # nothing did
