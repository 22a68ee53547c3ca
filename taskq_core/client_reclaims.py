"""JobsClient's reclaim feed: ``watch_reclaims``, every job the leader took back from a dead
worker (to pending, crashed, cancelled, or failed as a poison job), in event id order.

The feed is a cursor over the reclaim events (``poll_reclaim_events``). An event is shown only
once it is older than the visibility delay (TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY): ids are
drawn when a row is inserted, not when it commits, so a lower id may still be committing
when a higher one is readable; past the delay it has committed or never will, and the cursor
can move past it without skipping anything. Consumers that keep the cursor across restarts
get every event at least once (store ``event.id`` after handling it).

Between polls the feed waits ``poll_interval`` seconds, or less when the backend notifies a
wake (the reclaim sweep sends one): a wake starts a short catch-up, polling every
``catch_up_interval`` until the delay has passed since that wake, so a reclaim shows about one
delay after it happened instead of one poll interval. Every poll reads one bounded page; a
full page is followed by the next at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Protocol

from taskq_core.backend.protocol import Backend, EventRow
from taskq_core.enqueue_retry import TransientRetry
from taskq_core.errors import ConfigError

DEFAULT_POLL_INTERVAL = 5.0
DEFAULT_CATCH_UP_INTERVAL = 0.25
MAX_BATCH = 10_000
# How long one poll retries through database trouble (a restart, a failover) before the
# feed raises.
POLL_RETRY_TIMEOUT = 60.0


class _Client(Protocol):
    """The part of JobsClient the feed uses."""

    @property
    def backend(self) -> Backend: ...


@dataclass(frozen=True)
class _Feed:
    """One feed's cadence: the page size, the waits and the visibility delay (seconds)."""

    batch: int
    poll_interval: float
    catch_up_interval: float
    visibility_delay: float


def _seconds(value: timedelta | float, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ConfigError(f"{name} must be zero or more seconds")
    return seconds


def _default_visibility_delay() -> float:
    """TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY (environment, .env), read when a feed starts."""
    from taskq_core.settings import TaskqSettings

    return TaskqSettings.load().reclaim_event_visibility_delay


class ReclaimMethods:
    """The reclaim half of JobsClient (mixed into it; the client must be open)."""

    def watch_reclaims(
        self: _Client,
        after_id: int | None = None,
        *,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
        batch: int = 100,
        visibility_delay: timedelta | float | None = None,
        catch_up_interval: timedelta | float = DEFAULT_CATCH_UP_INTERVAL,
    ) -> AsyncGenerator[EventRow, None]:
        """Reclaim events after ``after_id`` (None: only those made from now on), oldest
        first, each once, for as long as the caller iterates.

        ``event.detail`` has from_state, to_state (pending, crashed, cancelled, failed),
        reason ('lock_expired', or 'operator_requeue' for ``taskq jobs requeue``),
        worker_id and started; a poison job's also poison and crashes. ``visibility_delay``
        None reads TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY. ``batch`` events at most per poll.
        Arguments are checked at the call (ConfigError), before the first iteration.
        """
        if after_id is not None and (isinstance(after_id, bool) or after_id < 0):
            raise ConfigError("after_id must be an event id (0 or more) or None")
        if not 1 <= batch <= MAX_BATCH:
            raise ConfigError(f"batch must be between 1 and {MAX_BATCH}")
        feed = _Feed(
            batch,
            max(_seconds(poll_interval, "poll_interval"), 0.001),
            max(_seconds(catch_up_interval, "catch_up_interval"), 0.001),
            _seconds(
                _default_visibility_delay() if visibility_delay is None else visibility_delay,
                "visibility_delay",
            ),
        )
        return _watch(self.backend, after_id, feed)


async def _watch(
    backend: Backend, after_id: int | None, feed: _Feed
) -> AsyncGenerator[EventRow, None]:
    """The feed's loop: poll a page, yield it, wait for a wake or the interval."""
    retry = TransientRetry(POLL_RETRY_TIMEOUT)
    if after_id is None:
        after_id = await retry.run(backend.get_latest_reclaim_event_id, what="watch_reclaims")
    cursor = after_id
    delay = timedelta(seconds=feed.visibility_delay)
    loop = asyncio.get_running_loop()
    catch_up_until = 0.0  # loop time until which a wake keeps the polls short
    async with _wakeups(backend) as wake:
        while True:
            if wake.is_set():
                # Something happened: what it wrote shows once past the delay, so poll
                # often until then (the bounded catch-up).
                wake.clear()
                catch_up_until = loop.time() + feed.visibility_delay + feed.catch_up_interval
            retry = TransientRetry(POLL_RETRY_TIMEOUT)
            poll = partial(backend.poll_reclaim_events, cursor, feed.batch, visibility_delay=delay)
            page = await retry.run(poll, what="watch_reclaims")
            for event in page:
                if event.id <= cursor:
                    continue  # never twice, whatever a backend returns
                cursor = event.id
                yield event
            if len(page) >= feed.batch:
                continue  # a full page: more are readable now
            left = catch_up_until - loop.time()
            wait = min(feed.catch_up_interval, left) if left > 0 else feed.poll_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=wait)


def _wakeups(backend: Backend) -> AbstractAsyncContextManager[asyncio.Event]:
    """The backend's wake notifications (the reclaim sweep sends one), or an event that is
    never set when it has none: the feed then polls on its interval alone."""
    subscribe = getattr(backend, "subscribe_wake", None)
    if subscribe is None:
        return contextlib.nullcontext(asyncio.Event())
    wakeups: AbstractAsyncContextManager[asyncio.Event] = subscribe()
    return wakeups
