"""WorkerDeps: what every loop of one worker shares (settings, backend, events, registries)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any
from uuid import UUID

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, WorkerInfo
from taskq_core.clock import Clock
from taskq_core.di import ProcessScopes
from taskq_core.obs.gauges import LeaderSample
from taskq_core.obs.metrics import Instruments, meters_for
from taskq_core.obs.spans import SpanLabels
from taskq_core.ratelimit.gate import RateLimiter
from taskq_core.settings import TaskqSettings
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.completer import Completer
from taskq_core.worker.transient import DatabaseOutage
from taskq_core.worker.watchdog import LoopLiveness


class ShutdownPhase(IntEnum):
    """Shutdown progress; only ever moves forward."""

    NONE = 0
    DRAINING = 1
    CANCELLING = 2
    FORCING = 3
    ABANDONING = 4


@dataclass
class WorkerStats:
    """Counters the until-idle exit code and the health endpoints read."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    rate_limited: int = 0  # claimed jobs a rate limit or reservation sent back to wait


@dataclass
class WorkerDeps:
    """Shared state of one worker process."""

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
    stats: WorkerStats = field(default_factory=WorkerStats)
    shutdown_event: asyncio.Event = field(default_factory=asyncio.Event)
    shutdown_begun: asyncio.Event = field(default_factory=asyncio.Event)
    producer_stop: asyncio.Event = field(default_factory=asyncio.Event)
    consumer_stop: asyncio.Event = field(default_factory=asyncio.Event)
    is_leader: asyncio.Event = field(default_factory=asyncio.Event)
    info: WorkerInfo | None = None  # the row registered at start, written again if deleted
    limiter: RateLimiter | None = None  # admission under rate limits and queue caps
    leader_since: float = 0.0  # monotonic time this worker last became the leader
    leader_renewed_at: float = 0.0  # monotonic start of its last renewal that succeeded
    shutdown_phase: ShutdownPhase = ShutdownPhase.NONE
    shutdown_started_at: float | None = None
    exit_code: int = 0
    # Whether spans are made: otel_enabled and an SDK tracer provider installed. The
    # producer refreshes it before every dispatch, so consumers read a flag per job instead
    # of probing the OpenTelemetry globals each time. Metrics need no such gate: without an
    # SDK meter provider an instrument call is a no-op.
    telemetry: bool = False
    leader_sample: LeaderSample | None = None  # the leader's last queue depth sample
    labels: SpanLabels = field(init=False)  # worker group and environment, on every span

    def __post_init__(self) -> None:
        self.labels = SpanLabels(self.settings.worker_group, self.settings.environment)

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

    @property
    def capacity(self) -> int:
        """How many jobs this worker holds at most: consumers plus prefetch."""
        return self.settings.max_concurrency + self.settings.effective_prefetch
