"""How a long-lived loop meets database trouble: the outage record, its backoff, and a guard.

The backend raises only TaskQ's own errors for database trouble (``errors.TRANSIENT_ERRORS``:
the database is away, or a statement asked to be retried). Every loop of a worker reports
each database call to one shared ``DatabaseOutage``: the first failure of an outage logs
``database_unavailable`` once, the first success after it logs ``database_available`` with
how long it lasted, and ``/ready`` answers 503 in between. Each loop waits between attempts
with its own ``Backoff`` (bounded, jittered), cut short as soon as any loop sees the database
again. Anything else goes through UnexpectedErrorGuard: tolerated with a loud record, but
re-raised after ``max_consecutive`` unexpected errors in a row, so a permanent fault kills
the worker instead of leaving a zombie that ticks but does no work. Writes that must outlive
their caller's cancellation go through ``shielded``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import Any, TypeVar

from taskq_core.clock import Clock
from taskq_core.errors import TRANSIENT_ERRORS, DatabaseUnavailableError
from taskq_core.obs.metrics import Instruments, instruments, labels
from taskq_core.worker.waits import wait_any

__all__ = [
    "TRANSIENT_ERRORS",
    "Backoff",
    "DatabaseOutage",
    "UnexpectedErrorGuard",
    "retry_pause",
    "shielded",
]

T = TypeVar("T")


class Backoff:
    """Delays between retries: ``initial`` doubling up to ``maximum``, each jittered +-20%.

    The 2 s ceiling keeps a loop's iteration (a statement bounded by its command timeout, then
    this wait) inside the stale-loop watchdog's budget, and a worker back within seconds of
    the database.
    """

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 2.0,
        *,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._next = initial

    def next(self) -> float:
        """The delay before the next attempt (and double it for the one after)."""
        base = self._next
        self._next = min(self._next * 2, self.maximum)
        return base * self._rng.uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        """The last attempt succeeded: start from ``initial`` again."""
        self._next = self.initial


class DatabaseOutage:
    """Whether the database is away, as every loop of one worker has seen it."""

    def __init__(self, clock: Clock, log: Any, meters: Instruments | None = None) -> None:
        self._clock = clock
        self._log = log
        self._meters = meters or instruments()
        self.started_at: float | None = None  # monotonic time of the first failure
        self.failures = 0
        self.outages = 0
        self.available = asyncio.Event()  # set while the database answers
        self.available.set()
        self.available_since = clock.monotonic()  # when the last outage ended (or start)
        self.last_error: str | None = None

    @property
    def ongoing(self) -> bool:
        """True from the first failure of an outage until the next success."""
        return self.started_at is not None

    def seconds(self) -> float:
        """How long the current outage has lasted (0 when there is none)."""
        if self.started_at is None:
            return 0.0
        return self._clock.monotonic() - self.started_at

    def failed(self, loop: str, exc: BaseException) -> None:
        """A database call of ``loop`` failed with a transient error."""
        self.last_error = str(exc) or type(exc).__name__
        if not isinstance(exc, DatabaseUnavailableError):
            # The database answered: a lost race or a statement timeout, not an outage.
            self._log.warning("database_call_retried", loop=loop, error=self.last_error)
            self._meters.database_retried_calls.add(1, labels(loop=loop))
            return
        self.failures += 1
        if self.started_at is None:
            self.started_at = self._clock.monotonic()
            self.outages += 1
            self.available.clear()
            self._log.warning("database_unavailable", loop=loop, error=self.last_error)
            self._meters.database_outages.add(1, labels(loop=loop))
        else:
            self._log.debug("database_still_unavailable", loop=loop, error=self.last_error)

    def succeeded(self) -> None:
        """A database call succeeded: an outage, if one was under way, is over."""
        if self.started_at is None:
            return
        lasted = self._clock.monotonic() - self.started_at
        self._log.info(
            "database_available", outage_seconds=round(lasted, 3), failed_calls=self.failures
        )
        self._meters.database_outage_duration.record(lasted)
        self.started_at = None
        self.failures = 0
        self.available_since = self._clock.monotonic()
        self.available.set()


async def retry_pause(database: DatabaseOutage, seconds: float, *stop: asyncio.Event) -> None:
    """Wait ``seconds`` before retrying a failed database call: less when another loop sees
    the database come back, or when one of ``stop`` is set."""
    if database.ongoing:
        await wait_any(database.available, *stop, timeout=seconds)
    else:
        await wait_any(*stop, timeout=seconds)


def shielded(awaitable: Awaitable[T]) -> asyncio.Future[T]:
    """``asyncio.shield(awaitable)`` for a write that must finish even when its caller is
    cancelled, whose exception is always retrieved.

    When the caller's await is cancelled (shutdown, a lost lease), nobody awaits the write any
    more; if it then fails (the database went away meanwhile), asyncio would report "Task
    exception was never retrieved" at garbage collection. That failure needs no handling: a
    write that did not happen changes nothing, and the lease decides who settles the job.
    """
    inner = asyncio.ensure_future(awaitable)
    inner.add_done_callback(_retrieve)
    return asyncio.shield(inner)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # marks it retrieved; whoever still awaits it gets it as well


class UnexpectedErrorGuard:
    """Counts consecutive unexpected errors of one loop; raises past the limit.

    Each error is counted in ``taskq.worker.leader_loop_unexpected_errors_total`` for a
    leader loop (``leader=True``), else in ``taskq.worker.loop_unexpected_errors_total``.
    """

    def __init__(
        self,
        loop_name: str,
        log: Any,
        *,
        max_consecutive: int = 5,
        leader: bool = False,
        meters: Instruments | None = None,
    ) -> None:
        self.loop_name = loop_name
        self.log = log
        self.max_consecutive = max_consecutive
        self.streak = 0
        meters = meters or instruments()
        self._counter = meters.leader_loop_errors if leader else meters.loop_errors
        self._labels = labels(loop=loop_name)

    def succeeded(self) -> None:
        """A fully successful iteration resets the streak."""
        self.streak = 0

    def failed(self, exc: Exception) -> None:
        """Log an unexpected error; re-raise it once the streak reaches the limit."""
        self.streak += 1
        self.log.error(
            "loop_unexpected_error",
            loop=self.loop_name,
            error=repr(exc),
            streak=self.streak,
            exc_info=exc,
        )
        self._counter.add(1, self._labels)
        if self.streak >= self.max_consecutive:
            raise exc
