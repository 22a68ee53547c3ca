"""What the client and the limiter record: jobs enqueued per queue and actor by every enqueue
path, refusals by max_pending by kind, cancel requests, and rate-limit denials."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.batches import AbortBatchAfter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.clock import FakeClock
from taskq_core.errors import MaxPendingExceededError
from taskq_core.ratelimit.gate import Admission, Denial, RateLimiter
from tests.obs.otel_sdk import Sdk


@actor(name="resize", queue="media")
async def resize(payload: dict[str, Any]) -> None:
    return None


@actor(name="capped", max_pending=1)
async def capped(payload: dict[str, Any]) -> None:
    return None


def sent(sdk: Sdk, queue: str, actor_name: str) -> float:
    return sdk.value("messaging.client.sent.messages", messaging__destination__name=queue,
                     taskq__actor=actor_name)  # fmt: skip


async def test_every_enqueue_path_counts_its_jobs_per_queue_and_actor(sdk: Sdk) -> None:
    async with JobsClient(backend=InMemoryBackend()) as client:
        await client.enqueue(resize, {})
        await client.enqueue_batch([(resize, {}), EnqueueItem(resize, {}, queue="bulk")])
        await client.enqueue_many_fast([(resize, {}), EnqueueItem("mail", {}, queue="mail")])
        await client.enqueue_batch([(resize, {})], failure_policy=AbortBatchAfter(1))
        await client.enqueue_batch_streaming([(resize, {})] * 3, chunk_size=2)
    assert sent(sdk, "media", "resize") == 1 + 1 + 1 + 1 + 3
    assert sent(sdk, "bulk", "resize") == 1
    assert sent(sdk, "mail", "mail") == 1


async def test_refusals_by_max_pending_are_counted_by_kind(sdk: Sdk) -> None:
    async with JobsClient(backend=InMemoryBackend(), registry=[capped]) as client:
        await client.enqueue(capped, {})
        with pytest.raises(MaxPendingExceededError):
            await client.enqueue(capped, {})
        with pytest.raises(MaxPendingExceededError):
            await client.enqueue_batch([(capped, {})])
        with pytest.raises(MaxPendingExceededError):
            await client.enqueue_many_fast([(capped, {})])
    for kind in ("single", "batch", "copy"):
        refused = sdk.value("taskq.backpressure.errors", taskq__actor="capped",
                            taskq__enqueue__kind=kind)  # fmt: skip
        assert refused == 1, kind
    assert sent(sdk, "default", "capped") == 1


async def test_each_cancel_call_is_counted_whatever_it_finds(sdk: Sdk) -> None:
    async with JobsClient(backend=InMemoryBackend()) as client:
        job = await client.enqueue(resize, {})
        await client.cancel(job.id)
        await client.cancel(job.id)  # already cancelled: still a request
    assert sdk.value("taskq.cancellation.requested") == 2


async def test_a_denied_admission_is_counted_by_actor_and_kind(sdk: Sdk) -> None:
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    limiter = RateLimiter({}, store, store, clock=clock, lease=timedelta(minutes=1))
    limiter.set_queue_caps({"media": 1})
    first = await limiter.admit("resize", {}, uuid4(), uuid4(), "media")
    second = await limiter.admit("resize", {}, uuid4(), uuid4(), "media")
    assert isinstance(first, Admission) and isinstance(second, Denial)
    denied = sdk.value("taskq.rate_limit.denials", taskq__actor="resize",
                       taskq__rate_limit__kind="reservation")  # fmt: skip
    assert denied == 1
    await store.close()
