"""WorkerState: what changes while one worker runs, apart from its fixed dependencies.

The events that stop its loops, whether it leads and since when, how far its shutdown has
gone, its exit code and counters. One object per worker, reached as ``deps.state``: every
write to a running worker goes here, so ``WorkerDeps`` itself can stay frozen.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import IntEnum

from taskq_core.backend.protocol import WorkerInfo
from taskq_core.obs.gauges import LeaderSample


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
class WorkerState:
    """The mutable run state of one worker process."""

    stats: WorkerStats = field(default_factory=WorkerStats)
    shutdown_event: asyncio.Event = field(default_factory=asyncio.Event)
    shutdown_begun: asyncio.Event = field(default_factory=asyncio.Event)
    producer_stop: asyncio.Event = field(default_factory=asyncio.Event)
    consumer_stop: asyncio.Event = field(default_factory=asyncio.Event)
    is_leader: asyncio.Event = field(default_factory=asyncio.Event)
    info: WorkerInfo | None = None  # the row registered at start, written again if deleted
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
