"""Idle limiter state: token buckets and sliding-window entries unused long past their rest
time are deleted (keyed limits leave one instance per key they ever saw)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from taskq_core.constants import LIMITER_STATE_SWEEP_EVERY
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import batch_beat

# State unused this long past its rest time goes, a bounded number of keys per call; looked
# for every LIMITER_STATE_SWEEP_EVERY seconds.
LIMITER_STATE_IDLE = timedelta(hours=1)
LIMITER_STATE_PER_CALL = 1000


@dataclass(frozen=True)
class LimiterStateConfig:
    """How idle state must be, how often to look, and how many keys one call deletes."""

    idle: timedelta = LIMITER_STATE_IDLE
    every: float = LIMITER_STATE_SWEEP_EVERY
    per_call: int = LIMITER_STATE_PER_CALL


class IdleLimiterStateSweep:
    """Deletes idle limiter state every ``config.every`` seconds, however often it is asked
    (it runs in the ``sweeps`` loop, which ticks every TASKQ_SWEEP_INTERVAL)."""

    def __init__(
        self, deps: WorkerDeps, *, beat: str = "sweeps", config: LimiterStateConfig | None = None
    ) -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it
        self.config = config or LimiterStateConfig()
        self._due = 0.0  # monotonic time of the next look

    async def run_once(self) -> int:
        """How many buckets and window keys went (0 when no look is due yet)."""
        now = self.deps.clock.monotonic()
        if now < self._due:
            return 0
        config = self.config
        self._due = now + config.every
        deleted = 0
        while True:
            swept = await self.deps.backend.sweep_idle_limiter_state(config.idle, config.per_call)
            deleted += sum(swept)
            if max(swept) < config.per_call:
                return deleted
            batch_beat(self.deps, self.beat)(sum(swept))
