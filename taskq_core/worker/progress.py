"""JobProgress: one running job's progress reports, numbered, published and written throttled.

``ctx.report_progress`` hands each report here (on the event loop; a plain ``def`` actor's
thread hops over with ``call_soon_threadsafe``). Every report gets the next seq and goes to
the Redis publisher at once when there is one; the job's row gets the latest report at most
once per TASKQ_PROGRESS_FLUSH_INTERVAL: the first report is written at once, later ones when
the interval since the last write has passed (a timer writes the latest one if the actor goes
quiet). A failed write is logged (the database outage record logs an outage once) and tried
again one interval later: progress never fails a job.

Before the job's outcome is written, the consumer calls ``finish``: the last report is
written (retried while the database is away, as the outcome write is), so a finished job
shows its final progress; a job whose lease was lost, or that was abandoned, drops it. Every
write is fenced by the lease and by the seq, so nothing a late or lost worker writes can
overwrite newer progress.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from taskq_core.backend.protocol import Lease
from taskq_core.backend.protocol.progress import ProgressBackend
from taskq_core.clock import Clock
from taskq_core.progress import MAX_SEQ, ProgressReport
from taskq_core.settings import TaskqSettings
from taskq_core.worker.transient import (
    TRANSIENT_ERRORS,
    Backoff,
    DatabaseOutage,
    retry_pause,
    shielded,
)


class ProgressPublisher(Protocol):
    """Where every report goes live (``progress_redis.RedisProgressPublisher``)."""

    def publish(self, report: ProgressReport) -> None:
        """Send ``report`` without waiting; never raises."""

    async def close(self) -> None:
        """Send what is queued (briefly) and let go of the connection."""


def open_publisher(settings: TaskqSettings, *, clock: Clock, log: Any) -> ProgressPublisher | None:
    """A live progress publisher: on Redis when TASKQ_REDIS_URL is set, else none (readers
    poll the job's row)."""
    if not settings.redis_url:
        return None
    from taskq_core.progress_redis import RedisProgressPublisher

    return RedisProgressPublisher.from_url(
        settings.redis_url, schema=settings.schema_name, clock=clock, log=log
    )


@dataclass
class _Shared:
    publisher: ProgressPublisher
    holders: int = 0


# One publisher (one Redis connection) per worker, held by its consumers while they run.
_PUBLISHERS: dict[UUID, _Shared] = {}


@asynccontextmanager
async def held_publisher(
    worker_id: UUID, settings: TaskqSettings, *, clock: Clock, log: Any
) -> AsyncIterator[None]:
    """Hold the worker's publisher while one of its consumers runs: the first consumer
    opens it, the last one to stop sends what is queued and closes it."""
    shared = _PUBLISHERS.get(worker_id)
    if shared is None:
        publisher = open_publisher(settings, clock=clock, log=log)
        if publisher is None:
            yield
            return
        shared = _PUBLISHERS[worker_id] = _Shared(publisher)
    shared.holders += 1
    try:
        yield
    finally:
        shared.holders -= 1
        if shared.holders == 0 and _PUBLISHERS.get(worker_id) is shared:
            del _PUBLISHERS[worker_id]
            await asyncio.shield(shared.publisher.close())


def publisher_of(worker_id: UUID) -> ProgressPublisher | None:
    """The publisher a worker's consumers hold (None without Redis)."""
    shared = _PUBLISHERS.get(worker_id)
    return None if shared is None else shared.publisher


class JobProgress:
    """The progress of one attempt of one job (a ``ProgressSink`` for its JobContext)."""

    __slots__ = (
        "_backend",
        "_clock",
        "_closing",
        "_database",
        "_flushing",
        "_interval",
        "_last_write",
        "_latest",
        "_lease",
        "_log",
        "_loop",
        "_lost",
        "_publisher",
        "_seq",
        "_stopped",
        "_thread",
        "_timer",
        "_written",
        "writes",
    )

    # Plain field assignments, alike ShutdownWatchdog's constructor (watchdog.py) by shape only:
    # other data.
    def __init__(
        self,
        lease: Lease,
        *,
        seq: int,
        backend: ProgressBackend,
        clock: Clock,
        interval: float,
        log: Any,
        database: DatabaseOutage,
        publisher: ProgressPublisher | None = None,
        lost: Callable[[], bool] = lambda: False,
    ) -> None:
        """``seq``: the seq the job's row holds (a new attempt goes on from it); ``lost``
        tells whether the lease is known lost (the final write is then dropped)."""
        self._lease = lease
        self._seq = seq
        self._written = seq
        self._backend = backend
        self._clock = clock
        self._interval = interval
        self._log = log
        self._database = database
        self._publisher = publisher
        self._lost = lost
        self._latest: ProgressReport | None = None
        self._last_write: float | None = None  # monotonic time of the last write attempt
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._stopped = False  # finished, or fenced out: nothing more is written
        self._closing = False  # finish() runs: it writes what is left itself
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.writes = 0  # rows written (tests count them)

    @property
    def latest(self) -> ProgressReport | None:
        """The last report made (written or not)."""
        return self._latest

    def report(self, current: float, total: float | None, message: str | None) -> None:
        """One checked report, on the event loop's thread."""
        if self._stopped or self._seq >= MAX_SEQ:
            return
        self._seq += 1
        report = ProgressReport(
            self._lease.job_id, self._seq, current, total, message, self._clock.now()
        )
        self._latest = report
        if self._publisher is not None:
            self._publisher.publish(report)
        self._schedule()

    def report_threadsafe(self, current: float, total: float | None, message: str | None) -> None:
        """One checked report from any thread (a plain ``def`` actor's): reports keep the
        order they were made in."""
        if threading.get_ident() == self._thread:
            self.report(current, total, message)
            return
        try:
            self._loop.call_soon_threadsafe(self.report, current, total, message)
        except RuntimeError:
            pass  # the loop is closed: the worker is gone and nobody reads it

    def _schedule(self) -> None:
        """Write the latest report now if the interval allows, else once it does."""
        if self._closing or self._flushing is not None:
            return  # the write under way takes the latest report
        wait = 0.0
        if self._last_write is not None:
            wait = self._last_write + self._interval - self._clock.monotonic()
        if wait <= 0:  # the clock, not the timer, says when the interval is over
            if self._timer is not None:
                self._timer.cancel()
            self._start_write()
        elif self._timer is None:
            self._timer = self._loop.call_later(wait, self._start_write)

    def _start_write(self) -> None:
        self._timer = None
        if self._stopped or self._flushing is not None:
            return
        self._flushing = self._loop.create_task(self._write_latest(), name="progress_write")

    async def _write_latest(self) -> None:
        try:
            await self._attempt()
        finally:
            self._flushing = None
        if not self._stopped and self._unwritten():
            self._schedule()

    def _unwritten(self) -> bool:
        return self._latest is not None and self._latest.seq > self._written

    async def _attempt(self) -> str:
        """Write the latest report if it is not written yet, once: ``written`` (or nothing
        to write), ``fenced`` (the lease no longer holds: nothing more is written),
        ``transient`` (the database is away) or ``error`` (logged)."""
        report = self._latest
        if report is None or report.seq <= self._written:
            return "written"
        if self._stopped:
            return "fenced"
        self._last_write = self._clock.monotonic()
        try:
            written = await self._backend.write_progress(self._lease, report.seq, report.state())
        except TRANSIENT_ERRORS as exc:
            self._database.failed("progress", exc)  # logs an outage once
            return "transient"
        except Exception as exc:  # a report must never fail its job
            self._log.warning(
                "progress_write_failed",
                job_id=str(self._lease.job_id),
                error=f"{type(exc).__name__}: {exc}",
            )
            return "error"
        self._database.succeeded()
        if not written:  # another attempt (or nobody) holds the job now
            self._stopped = True
            return "fenced"
        self.writes += 1
        self._written = max(self._written, report.seq)
        return "written"

    async def finish(self, *, write: bool) -> None:
        """The body ended: stop the timer and, when ``write``, write the last report before
        the job's outcome (retried while the database is away and the lease holds; any
        other error drops it, logged)."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            await shielded(self._flushing)  # never two writes of one job at once
        backoff = Backoff()
        while write and not self._lost() and await self._attempt() == "transient":
            await retry_pause(self._database, backoff.next())
        self._stopped = True

    @property
    def used(self) -> bool:
        """Whether the actor reported anything (the consumer skips ``finish`` otherwise)."""
        return self._latest is not None
