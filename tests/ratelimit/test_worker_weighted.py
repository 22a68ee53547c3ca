"""The worker enforces weighted limits on the memory backend and on PostgreSQL: jobs take
their cost in window uses (fixed or computed from the payload), a denied one waits without
using an attempt, and a job whose cost can never be admitted, or whose cost function raises,
fails at once with the reason instead of waiting forever."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

from taskq_core import RateLimitRegistry, SlidingWindow, actor
from taskq_core.backend.protocol import Backend, EnqueueArgs
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.ratelimit.grants import most_units_surely_in_one_window, record_grants
from tests.worker.conftest import fast_settings

WINDOW = timedelta(milliseconds=300)


@actor(rate_limits=[SlidingWindow("bulk_sms", 6, WINDOW, cost=lambda p: p["recipients"])])
async def bulk_sms(payload: dict[str, Any]) -> int:
    return int(payload["recipients"])


async def drain(backend: Backend, actors: list[Any]) -> int:
    worker = Worker(
        fast_settings(),
        {ref.name: ref for ref in actors},
        backend=backend,
        until_idle=True,
        install_signal_handlers=False,
        rate_limits=RateLimitRegistry(),
    )
    return await asyncio.wait_for(worker.run(), 60)


async def test_a_weighted_window_admits_its_units_per_window(backend: Backend) -> None:
    sizes = [3, 1, 2, 3, 2, 1, 3, 2]
    jobs = [await backend.enqueue(EnqueueArgs("bulk_sms", {"recipients": n})) for n in sizes]
    grants = record_grants(backend)
    assert await drain(backend, [bulk_sms]) == 0
    rows = [await backend.get(job.id) for job in jobs]
    assert all(row is not None and row.status is JobStatus.SUCCEEDED for row in rows)
    assert all(row is not None and row.attempts_used == 1 for row in rows)  # waits are free
    # A grant per job at least: a job granted but then given back unstarted (its lease seen
    # expired under load) is granted again when claimed again, and that use counts too.
    assert Counter(units for _, _, units in grants) >= Counter(sizes)
    # 16 units against 6 per window: jobs waited, and no window admitted more than 6 units.
    assert most_units_surely_in_one_window(grants, WINDOW) <= 6
    denials = [
        event
        for job in jobs
        for event in await backend.get_events(job.id)
        if event.detail.get("reason") == "rate_limit:bulk_sms"
    ]
    assert denials and all(event.to_status is JobStatus.SCHEDULED for event in denials)


async def test_a_job_priced_beyond_the_limit_or_unpriced_fails_with_the_reason(
    backend: Backend,
) -> None:
    fits = await backend.enqueue(EnqueueArgs("bulk_sms", {"recipients": 6}))
    free = await backend.enqueue(EnqueueArgs("bulk_sms", {"recipients": 0}))
    too_big = await backend.enqueue(EnqueueArgs("bulk_sms", {"recipients": 7}))
    unpriced = await backend.enqueue(EnqueueArgs("bulk_sms", {}))
    assert await drain(backend, [bulk_sms]) == 3  # until-idle: some jobs failed
    for job in (fits, free):
        row = await backend.get(job.id)
        assert row is not None and row.status is JobStatus.SUCCEEDED
    big, broken = await backend.get(too_big.id), await backend.get(unpriced.id)
    assert big is not None and big.status is JobStatus.FAILED
    assert big.error_class == "RateLimitCostError"
    assert big.error_message == (
        "cost 7 exceeds the capacity of limit 'bulk_sms' (sliding window 6 per 0.3s): "
        "the job could never be admitted"
    )
    assert broken is not None and broken.status is JobStatus.FAILED
    assert broken.error_class == "RateLimitCostError"
    assert broken.error_message == (
        "cost function of limit 'bulk_sms' raised KeyError: 'recipients'"
    )
