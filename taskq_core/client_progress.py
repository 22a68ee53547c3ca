"""JobsClient's live progress: ``watch_progress``, a running job's reports as they come.

With TASKQ_REDIS_URL the feed subscribes to the job's channel (every report the actor makes,
``taskq_core.progress_redis``); without it, it reads the job's row (the latest report written,
at most one per TASKQ_PROGRESS_FLUSH_INTERVAL). Either way it reads the row once per interval
too: for the report stored before the feed started, and to end when the job is terminal.
Reports come in seq order, none twice; a reader may miss some (Redis drops what nobody hears,
the row keeps only the latest), never the last one the job stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from datetime import timedelta
from functools import partial
from typing import Any, Protocol
from uuid import UUID

from taskq_core.backend.protocol import Backend
from taskq_core.enqueue_retry import TransientRetry
from taskq_core.errors import ConfigError, JobNotFoundError
from taskq_core.obs.logs import get_logger
from taskq_core.progress import ProgressReport
from taskq_core.settings import TaskqSettings

# How long one read of the row retries through database trouble before the feed raises.
READ_RETRY_TIMEOUT = 60.0


class _Client(Protocol):
    """The part of JobsClient the feed uses."""

    _schema: str | None

    @property
    def backend(self) -> Backend: ...


class ProgressMethods:
    """The progress half of JobsClient (mixed into it; the client must be open)."""

    def watch_progress(
        self: _Client,
        job_id: UUID | str,
        *,
        poll_interval: timedelta | float | None = None,
        redis_url: str | None = None,
    ) -> AsyncGenerator[ProgressReport, None]:
        """The job's progress reports, oldest first, until the job is terminal (the last
        one it stored included). The first iteration raises JobNotFoundError for an unknown
        job. ``poll_interval`` (default TASKQ_PROGRESS_FLUSH_INTERVAL) is how often the row
        is read; ``redis_url`` (default TASKQ_REDIS_URL) where live reports are heard.
        Close it with ``aclose()`` to stop early."""
        settings = TaskqSettings.load(schema_name=self._schema)
        if poll_interval is None:
            interval = settings.progress_flush_interval
        else:
            interval = (
                poll_interval.total_seconds()
                if isinstance(poll_interval, timedelta)
                else float(poll_interval)
            )
        if interval <= 0:
            raise ConfigError("poll_interval must be more than 0 seconds")
        ident = job_id if isinstance(job_id, UUID) else UUID(str(job_id))
        url = redis_url or settings.redis_url
        return _watch(self.backend, ident, interval, url, settings.schema_name)


async def _watch(
    backend: Backend, job_id: UUID, interval: float, redis_url: str | None, schema: str
) -> AsyncGenerator[ProgressReport, None]:
    live = await _subscribe(redis_url, schema, job_id)
    last = 0
    seen_row = False
    try:
        while True:
            read = partial(backend.get, job_id)
            job = await TransientRetry(READ_RETRY_TIMEOUT).run(read, what="watch_progress")
            if job is None:
                if not seen_row:
                    raise JobNotFoundError(f"no job with id {job_id}")
                return  # archived (or deleted) meanwhile: it is over
            seen_row = True
            stored = ProgressReport.of_row(job)
            if stored is not None and stored.seq > last:
                last = stored.seq
                yield stored
            if job.is_terminal:
                return
            if live is None:
                await asyncio.sleep(interval)  # the poll's cadence
                continue
            try:
                async with contextlib.aclosing(live.reports(interval)) as reports:
                    async for report in reports:
                        if report.seq > last:
                            last = report.seq
                            yield report
            except Exception as exc:  # Redis failed: the row alone from now on
                _log().warning("progress_watch_redis_failed", job_id=str(job_id), error=str(exc))
                await _close(live)
                live = None
    finally:
        if live is not None:
            await _close(live)


async def _subscribe(redis_url: str | None, schema: str, job_id: UUID) -> Any:
    """The job's channel, subscribed; None without Redis or when it cannot be reached."""
    if not redis_url:
        return None
    from taskq_core.progress_redis import ProgressSubscription

    live = ProgressSubscription.from_url(redis_url, schema, job_id)
    try:
        await live.open()
    except Exception as exc:
        _log().warning("progress_watch_redis_failed", job_id=str(job_id), error=str(exc))
        await _close(live)
        return None
    return live


async def _close(live: Any) -> None:
    with contextlib.suppress(Exception):
        await live.close()


def _log() -> Any:
    return get_logger("client")
