"""JobsClient.watch_reclaims on both backends: every reclaim once, in id order, from a cursor or
from now, in bounded pages, woken early by the backend's wake notification."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from taskq_core import JobsClient
from taskq_core.backend.protocol import Backend, EventRow
from taskq_core.errors import ConfigError
from tests.conformance.conftest import Harness
from tests.conformance.states import GRACE, LEASE, running_job

EXPIRED = LEASE.total_seconds() + 1
DELAY = timedelta(seconds=2)
PAST_DELAY = 3.0
# Long enough that only a wake, never the interval, can end a wait within a test's timeout.
NEVER = 3600.0
TIMEOUT = 10.0


class Spy:
    """The backend under test, telling the test when the feed has read from it."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.polled = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def poll_reclaim_events(self, *args: Any, **kwargs: Any) -> list[EventRow]:
        events: list[EventRow] = await self._backend.poll_reclaim_events(*args, **kwargs)
        self.polled.set()
        return events


@pytest.fixture
async def spy(harness: Harness) -> Spy:
    return Spy(harness.backend)


@pytest.fixture
async def client(spy: Spy) -> AsyncIterator[JobsClient]:
    async with JobsClient(backend=spy) as opened:  # type: ignore[arg-type]
        yield opened


async def reclaim(harness: Harness, count: int = 1) -> list[UUID]:
    """``count`` running jobs whose worker died, reclaimed by the leader; their ids."""
    jobs = [(await running_job(harness.backend, max_attempts=2))[0] for _ in range(count)]
    await harness.travel(EXPIRED)
    assert await harness.backend.reclaim_expired_leases(GRACE, GRACE) == count
    return [job.id for job in jobs]


async def take(feed: AsyncIterator[EventRow], count: int) -> list[EventRow]:
    async with asyncio.timeout(TIMEOUT):
        return [await anext(feed) for _ in range(count)]


async def test_every_reclaim_comes_once_in_id_order(harness: Harness, client: JobsClient) -> None:
    first = await reclaim(harness, 3)
    await harness.travel(PAST_DELAY)
    feed = client.watch_reclaims(0, poll_interval=0.05, visibility_delay=DELAY)
    events = await take(feed, 3)
    assert {event.job_id for event in events} == set(first)
    assert [event.id for event in events] == sorted(event.id for event in events)
    assert {event.kind for event in events} == {"reclaim"}
    [late] = await reclaim(harness)
    await harness.travel(PAST_DELAY)
    [event] = await take(feed, 1)
    # The next one is the new reclaim: none of the first three came again.
    assert event.job_id == late and event.id > events[-1].id
    assert event.detail["to_state"] == "pending" and event.detail["reason"] == "lock_expired"
    await feed.aclose()


async def test_the_feed_continues_after_the_cursor(harness: Harness, client: JobsClient) -> None:
    await reclaim(harness, 3)
    await harness.travel(PAST_DELAY)
    events = await harness.backend.poll_reclaim_events(0)
    feed = client.watch_reclaims(events[0].id, poll_interval=0.05, visibility_delay=DELAY)
    assert [e.id for e in await take(feed, 2)] == [e.id for e in events[1:]]
    await feed.aclose()


async def test_an_event_is_not_shown_before_the_visibility_delay(
    harness: Harness, client: JobsClient, spy: Spy
) -> None:
    [job_id] = await reclaim(harness)
    feed = client.watch_reclaims(0, poll_interval=0.05, visibility_delay=DELAY)
    waiting = asyncio.create_task(anext(feed))
    async with asyncio.timeout(TIMEOUT):
        await spy.polled.wait()
    assert not waiting.done()
    await harness.travel(PAST_DELAY)
    async with asyncio.timeout(TIMEOUT):
        event = await waiting
    assert event.job_id == job_id
    await feed.aclose()


async def test_without_a_cursor_the_feed_starts_from_now(
    harness: Harness, client: JobsClient, spy: Spy
) -> None:
    await reclaim(harness, 2)
    await harness.travel(PAST_DELAY)
    feed = client.watch_reclaims(poll_interval=0.05, visibility_delay=DELAY)
    waiting = asyncio.create_task(anext(feed))
    async with asyncio.timeout(TIMEOUT):
        await spy.polled.wait()  # the feed has read where "now" is
    [new] = await reclaim(harness)
    await harness.travel(PAST_DELAY)
    async with asyncio.timeout(TIMEOUT):
        event = await waiting
    assert event.job_id == new
    await feed.aclose()


async def test_a_full_page_is_followed_by_the_next_without_waiting(
    harness: Harness, client: JobsClient
) -> None:
    job_ids = await reclaim(harness, 5)
    await harness.travel(PAST_DELAY)
    feed = client.watch_reclaims(0, poll_interval=NEVER, batch=2, visibility_delay=DELAY)
    events = await take(feed, 5)
    assert {event.job_id for event in events} == set(job_ids)
    await feed.aclose()


async def test_a_wake_ends_the_wait_for_a_reclaim(
    harness: Harness, client: JobsClient, spy: Spy
) -> None:
    feed = client.watch_reclaims(0, poll_interval=NEVER, visibility_delay=0)
    waiting = asyncio.create_task(anext(feed))
    async with asyncio.timeout(TIMEOUT):
        await spy.polled.wait()  # subscribed, polled once, now waiting for an hour
    [job_id] = await reclaim(harness)
    async with asyncio.timeout(TIMEOUT):
        event = await waiting
    assert event.job_id == job_id
    await feed.aclose()


@pytest.mark.postgres_only("the visibility delay passes on the database clock, in real time")
async def test_after_a_wake_the_feed_catches_up_once_the_delay_passed(
    harness: Harness, client: JobsClient, spy: Spy
) -> None:
    feed = client.watch_reclaims(
        0, poll_interval=NEVER, visibility_delay=0.5, catch_up_interval=0.05
    )
    waiting = asyncio.create_task(anext(feed))
    async with asyncio.timeout(TIMEOUT):
        await spy.polled.wait()
    [job_id] = await reclaim(harness)
    # The NOTIFY arrives before the event clears the delay: the feed keeps polling briefly
    # instead of waiting its hour-long interval.
    async with asyncio.timeout(TIMEOUT):
        event = await waiting
    assert event.job_id == job_id
    await feed.aclose()


async def test_bad_arguments_are_refused_at_the_call(client: JobsClient) -> None:
    with pytest.raises(ConfigError, match="batch"):
        client.watch_reclaims(batch=0)
    with pytest.raises(ConfigError, match="after_id"):
        client.watch_reclaims(-1)
    with pytest.raises(ConfigError, match="poll_interval"):
        client.watch_reclaims(poll_interval=-1)


async def test_the_latest_reclaim_event_id_counts_only_reclaims_visible_or_not(
    harness: Harness,
) -> None:
    backend = harness.backend
    assert await backend.get_latest_reclaim_event_id() == 0
    [job_id] = await reclaim(harness)
    reclaim_event = (await backend.get_events(job_id))[-1]
    assert reclaim_event.kind == "reclaim"
    # Not past the visibility delay yet, and later events of other kinds do not count.
    job, _ = await running_job(backend)
    assert await backend.mark_succeeded(job.lease(), None)
    assert await backend.get_latest_reclaim_event_id() == reclaim_event.id
