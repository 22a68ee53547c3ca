"""WorkerDeps: what every loop of one worker shares (settings, backend, registries, queues).

Frozen: set up once before the loops start. What a run changes (events, leadership,
shutdown progress, counters) is the one mutable ``WorkerState`` it holds as ``state``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, Denied, RetryAfterOutcome
from taskq_core.clock import Clock
from taskq_core.di import ProcessScopes
from taskq_core.gathered import GatheredCalls
from taskq_core.obs.metrics import Instruments, meters_for
from taskq_core.obs.spans import SpanLabels
from taskq_core.ratelimit.gate import RateLimiter
from taskq_core.settings import TaskqSettings
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.completer import Completer
from taskq_core.worker.state import WorkerState
from taskq_core.worker.transient import DatabaseOutage
from taskq_core.worker.watchdog import LoopLiveness


# Alike memory/store.py's JobRecord by shape only: typed dataclass fields, other data.
@dataclass(frozen=True)
class WorkerDeps:
    """The fixed dependencies of one worker process, and its run state as ``state``."""

    worker_id: UUID
    settings: TaskqSettings
    backend: Backend
    registry: dict[str, ActorRef]
    clock: Clock
    log: Any
    scopes: ProcessScopes
    executor: ThreadPoolExecutor
    local_queue: asyncio.Queue[ActiveJob]  # claimed jobs, in dispatch order
    liveness: LoopLiveness
    completer: Completer
    database: DatabaseOutage
    active: ActiveJobs = field(default_factory=ActiveJobs)
    limiter: RateLimiter | None = None  # admission under rate limits and queue caps
    state: WorkerState = field(default_factory=WorkerState)  # everything a run changes
    labels: SpanLabels = field(init=False)  # worker group and environment, on every span
    # The limits' denials of this worker, written together (admission.py).
    denials: GatheredCalls[Denied, RetryAfterOutcome] = field(init=False)

    def __post_init__(self) -> None:
        # Derived once; the dataclass is frozen, hence the setattr.
        object.__setattr__(
            self, "labels", SpanLabels(self.settings.worker_group, self.settings.environment)
        )
        object.__setattr__(self, "denials", GatheredCalls(self._write_denials, "denials"))

    async def _write_denials(self, denials: list[Denied]) -> list[RetryAfterOutcome]:
        outcomes = await self.backend.mark_denied_many(self.worker_id, denials)
        return [outcomes[denied.job_id] for denied in denials]

    @property
    def metering(self) -> bool:
        """Whether metrics are recorded (TASKQ_OTEL_ENABLED)."""
        return self.settings.otel_enabled

    @property
    def meters(self) -> Instruments:
        """The metric instruments; ones that record nothing when TASKQ_OTEL_ENABLED=false."""
        return meters_for(self.settings.otel_enabled)

    @property
    def queues(self) -> list[str]:
        """The queues this worker consumes."""
        return self.settings.queues

    def in_flight(self) -> int:
        """Jobs claimed by this worker: executing plus waiting in the local queue."""
        return self.active.in_flight()
