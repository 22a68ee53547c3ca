"""Bounded retries of one client call through database trouble (a restart, a failover).

Only TaskQ's transient errors (``errors.TRANSIENT_ERRORS``: the database is away, or a statement
asked to be retried) are retried, with a doubling, jittered pause between attempts; once the
time budget since the first attempt is spent, the last error is raised. Retrying an insert is
safe only because the job id is fixed before the first attempt and the backend's enqueue is
idempotent on it: an attempt that committed but whose answer was lost is found, not repeated.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from taskq_core.errors import TRANSIENT_ERRORS
from taskq_core.obs.logs import get_logger

T = TypeVar("T")

_log = get_logger("client")


class TransientRetry:
    """Run calls again while they fail transiently, all within one time budget.

    ``budget`` seconds count from construction, so the calls of one operation (the reads that
    prepare an enqueue, then its insert) share it; 0 makes every call a single attempt. Pauses
    start at ``initial`` seconds and double up to ``maximum``, each jittered by +-``jitter``,
    and never run past the budget: the last attempt is made when it runs out.
    """

    def __init__(
        self,
        budget: float,
        *,
        initial: float = 0.1,
        maximum: float = 2.0,
        jitter: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._monotonic = monotonic
        self._sleep = sleep
        self._deadline = monotonic() + max(budget, 0.0)
        self._pause = initial
        self._maximum = maximum
        self._jitter = jitter
        self._rng = rng or random.Random()
        self.retries = 0  # attempts made after a transient failure, over every call

    async def run(self, call: Callable[[], Awaitable[T]], *, what: str) -> T:
        """``call()``'s result; its last transient error once the budget is spent."""
        failures = 0
        while True:
            try:
                result = await call()
            except TRANSIENT_ERRORS as exc:
                failures += 1
                remaining = self._deadline - self._monotonic()
                if remaining <= 0:
                    if failures > 1:
                        _log.warning("client_call_gave_up", call=what, attempts=failures)
                    raise
                pause = min(self._next_pause(), remaining)
                _log.warning(
                    "client_call_retrying", call=what, error=str(exc), retry_in=round(pause, 3)
                )
                await self._sleep(pause)
                self.retries += 1
                continue
            if failures:
                _log.info("client_call_recovered", call=what, attempts=failures + 1)
            return result

    def _next_pause(self) -> float:
        base = self._pause
        self._pause = min(self._pause * 2, self._maximum)
        return base * self._rng.uniform(1 - self._jitter, 1 + self._jitter)
