"""DenialLines: when each job a reservation denied comes back, so a backlog returns paced,
not all at once.

Each reservation keeps a line end: each denial takes the next place, one interval after the
previous one, never sooner than its retry_after. The interval is a slot's turnover (or, for a
limit whose store is away, the limit's own interval) times the number of live workers that
run the actor: every worker keeps its own lines, so together they bring a backlog back at
about the rate the reservation frees slots, instead of claiming and denying every waiting job
again every second (a dispatch and a write each). Rate limits need none of this: their
store keeps one line per limit for the whole fleet (``LimitGrant``).
"""

from __future__ import annotations

from datetime import timedelta

from taskq_core.clock import Clock

# Lines past their end are forgotten once this many limits have one (keyed limits).
KEPT = 10_000


class DenialLines:
    """The lines of one worker's limits, on its monotonic clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._ends: dict[str, float] = {}  # limit -> monotonic end of its line

    def place(self, limit: str, retry_after: timedelta, interval: float) -> timedelta:
        """The next place of ``limit``'s line, as a wait from now: ``interval`` seconds after
        the previous place, and not before ``retry_after``."""
        now = self.clock.monotonic()
        if len(self._ends) > KEPT:
            self._ends = {key: end for key, end in self._ends.items() if end > now}
        spot = max(self._ends.get(limit, now), now + retry_after.total_seconds())
        self._ends[limit] = spot + interval
        return timedelta(seconds=spot - now)
