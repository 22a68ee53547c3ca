"""Live progress over Redis pub/sub: the worker's publisher and the readers' subscription.

Every report a worker's actors make is published on the job's channel
(``taskq_core.progress.progress_channel``: ``taskq:<schema>:progress:<job_id>``) as one JSON
object. Publishing never holds an actor up: reports go to a bounded queue that one task
sends in pipelines; a full queue drops reports (they are ephemeral: the job's row keeps the
latest one written). When Redis fails, the publisher logs it once, drops reports for a
short, growing pause, tries again, and logs once more when Redis is back.

Only a process with TASKQ_REDIS_URL set imports this module (and so the ``redis`` package).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from redis.asyncio import Redis

from taskq_core.clock import Clock
from taskq_core.progress import ProgressReport, progress_channel
from taskq_core.ratelimit.redis import client_options

# Reports waiting to be sent at most; more are dropped until the sender catches up.
QUEUE_LIMIT = 10_000
# Reports sent in one pipeline at most.
PIPELINE_MAX = 500
# After a failure, reports are dropped for this long, doubling up to the maximum.
PAUSE_INITIAL = 0.5
PAUSE_MAX = 10.0
# How long close() lets the sender empty its queue.
CLOSE_BUDGET = 2.0


def redis_client(url: str, *, timeout: float = 1.0) -> Any:
    """A client that fails fast (``timeout`` seconds to connect or answer, no retries of its
    own): a Redis that hangs must not delay a worker's reports or its shutdown."""
    return Redis.from_url(url, **client_options(timeout))


class RedisProgressPublisher:
    """Publishes every report of one worker's jobs (a ``worker.progress.ProgressPublisher``)."""

    def __init__(self, client: Any, *, schema: str, clock: Clock, log: Any) -> None:
        self._client = client
        self._schema = schema
        self._clock = clock
        self._log = log
        self._queue: asyncio.Queue[ProgressReport] = asyncio.Queue(QUEUE_LIMIT)
        self._sender: asyncio.Task[None] | None = None
        self._down_since: float | None = None  # monotonic time of the outage's first failure
        self._paused_until = 0.0
        self._pause = PAUSE_INITIAL
        self.sent = 0
        self.dropped = 0

    @classmethod
    def from_url(cls, url: str, *, schema: str, clock: Clock, log: Any) -> RedisProgressPublisher:
        """A publisher on the Redis at ``url`` (it connects on the first report)."""
        return cls(redis_client(url), schema=schema, clock=clock, log=log)

    def publish(self, report: ProgressReport) -> None:
        """Queue ``report`` for sending; never waits, never raises."""
        if self._clock.monotonic() < self._paused_until:
            self.dropped += 1  # Redis failed a moment ago: the report is ephemeral
            return
        try:
            self._queue.put_nowait(report)
        except asyncio.QueueFull:
            self.dropped += 1
            return
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(
                self._send_forever(), name="progress_publisher"
            )

    async def _send_forever(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < PIPELINE_MAX and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self.send(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def send(self, batch: list[ProgressReport]) -> bool:
        """Publish ``batch`` in one pipeline; False when Redis failed (logged once per
        outage, and reports are dropped for a pause)."""
        if self._clock.monotonic() < self._paused_until:
            self.dropped += len(batch)
            return False
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for report in batch:
                    pipe.publish(progress_channel(self._schema, report.job_id), report.encode())
                await pipe.execute()
        except Exception as exc:  # a Redis failure never reaches a job
            self.dropped += len(batch)
            now = self._clock.monotonic()
            if self._down_since is None:
                self._down_since = now
                self._log.warning(
                    "progress_publish_failed",
                    error=f"{type(exc).__name__}: {exc}",
                    note="live progress is dropped until Redis answers; the job rows keep it",
                )
            self._paused_until = now + self._pause
            self._pause = min(self._pause * 2, PAUSE_MAX)
            return False
        self.sent += len(batch)
        if self._down_since is not None:
            self._log.info(
                "progress_publish_recovered",
                outage_seconds=round(self._clock.monotonic() - self._down_since, 3),
                dropped=self.dropped,
            )
            self._down_since = None
            self._pause = PAUSE_INITIAL
        return True

    async def close(self) -> None:
        """Send what is queued (within a short budget), then close the client."""
        sender, self._sender = self._sender, None
        if sender is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), CLOSE_BUDGET)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        await self._client.aclose()


class ProgressSubscription:
    """One job's channel, for a live reader (``JobsClient.watch_progress``)."""

    def __init__(self, client: Any, schema: str, job_id: UUID) -> None:
        self._client = client
        self._pubsub = client.pubsub()
        self._channel = progress_channel(schema, job_id)

    @classmethod
    def from_url(cls, url: str, schema: str, job_id: UUID) -> ProgressSubscription:
        """A subscription on the Redis at ``url`` (``open`` subscribes)."""
        return cls(redis_client(url, timeout=5.0), schema, job_id)

    async def open(self) -> None:
        """Subscribe (before the reader reads the row, so no report falls between)."""
        await self._pubsub.subscribe(self._channel)

    async def reports(self, within: float) -> AsyncIterator[ProgressReport]:
        """The reports that arrive in the next ``within`` seconds, in order."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while (left := deadline - loop.time()) > 0:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is None or message.get("type") != "message":
                continue
            report = ProgressReport.decode(message["data"])
            if report is not None:
                yield report

    async def close(self) -> None:
        """Unsubscribe and close the connection."""
        try:
            await self._pubsub.aclose()
        finally:
            await self._client.aclose()
