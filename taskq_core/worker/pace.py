"""BodyPace: how long bodies run lately, and so how many jobs to claim ahead of consumers.

TASKQ_PREFETCH set: that many, always. Unset, as many as the consumers will start within
the next ``PREFETCH_HORIZON``: ``consumers x horizon / mean body time``, between a floor (a
quarter of the consumers) and a ceiling (``settings.effective_prefetch``). Fast jobs get a
deep local queue, so a consumer never waits for a claim's round trip and claims come in
large batches; slow jobs get a shallow one, so an idle worker of the fleet is not left
watching another hold jobs it will not start for seconds.

The mean is taken over bodies that ended (a moving average), not over starts: starts come in
bursts as claims arrive, ends at the pace the bodies set.
"""

from __future__ import annotations

import math

# How far ahead the local queue reaches: a few claim round trips (a claim takes 1-10 ms), so
# one is always under way before the consumers run dry.
PREFETCH_HORIZON = 0.05
# The moving average's weight of the newest body: about the last dozen bodies count.
NEWEST_WEIGHT = 1 / 8
# Below the clock's grain a body's time says nothing more.
SHORTEST_BODY = 1e-5


class BodyPace:
    """The moving average of body run times, and the prefetch it implies."""

    def __init__(self) -> None:
        self.mean: float | None = None  # seconds; None until a body ended

    def ran(self, seconds: float) -> None:
        """A body ended after ``seconds``."""
        seconds = max(seconds, SHORTEST_BODY)
        mean = self.mean
        self.mean = seconds if mean is None else mean + (seconds - mean) * NEWEST_WEIGHT

    def prefetch(self, consumers: int, fixed: int | None, ceiling: int) -> int:
        """Jobs to hold beyond ``consumers``: ``fixed`` (TASKQ_PREFETCH) when set, else what
        they start within ``PREFETCH_HORIZON``, between a quarter of them and ``ceiling``."""
        if fixed is not None:
            return fixed
        floor = min(ceiling, max(1, consumers // 4))
        if self.mean is None:
            return floor
        ahead = math.ceil(consumers * PREFETCH_HORIZON / self.mean)
        return max(floor, min(ceiling, ahead))
