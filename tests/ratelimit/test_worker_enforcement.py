"""The worker enforces rate limits before an actor's body runs, on the memory backend and on
PostgreSQL: a denied job goes back to ``scheduled`` without using an attempt, names the limit
in its event, and runs later; a key function that raises fails its job with the reason; an
unknown limit name stops the worker before it starts."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from taskq_core import (
    KeyedRateLimitRef,
    RateLimitRegistry,
    SlidingWindow,
    TokenBucket,
    actor,
)
from taskq_core.backend.protocol import Backend, EnqueueArgs, JobFilter
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker
from tests.ratelimit.grants import most_units_surely_in_one_window, record_grants
from tests.worker.conftest import fast_settings

API = TokenBucket("api", 10, burst=2)


class Charge(BaseModel):
    tenant: str


@actor(rate_limits=[API])
async def call_api(payload: dict[str, Any]) -> str:
    return "called"


@actor(rate_limits=[SlidingWindow("sms", 2, timedelta(milliseconds=300))])
async def send_sms(payload: dict[str, Any]) -> str:
    return "sent"


@actor
async def unlimited(payload: dict[str, Any]) -> str:
    return "free"


def _tenant_key(payload: Charge) -> str:
    if payload.tenant == "broken":
        raise LookupError("tenant not found")
    return payload.tenant


@actor(rate_limits=[KeyedRateLimitRef(TokenBucket("per_tenant", 100), _tenant_key, Charge)])
async def bill(payload: Charge) -> str:
    return payload.tenant


def worker(backend: Backend, actors: list[Any], **overrides: Any) -> Worker:
    return Worker(
        fast_settings(**overrides),
        {ref.name: ref for ref in actors},
        backend=backend,
        until_idle=True,
        install_signal_handlers=False,
        rate_limits=RateLimitRegistry(),
    )


async def drain(backend: Backend, actors: list[Any], **overrides: Any) -> int:
    return await asyncio.wait_for(worker(backend, actors, **overrides).run(), 60)


def most_in_any_window(starts: list[datetime], window: timedelta) -> int:
    """The most start times that fall within one ``window`` (the limiter's clock stamped them)."""
    ordered = sorted(starts)
    return max(
        sum(1 for later in ordered[i:] if later - first < window) for i, first in enumerate(ordered)
    )


async def test_denied_jobs_wait_without_using_attempts_then_run(backend: Backend) -> None:
    jobs = [await backend.enqueue(EnqueueArgs("call_api", {"n": n})) for n in range(8)]
    assert await drain(backend, [call_api]) == 0
    rows = [await backend.get(job.id) for job in jobs]
    assert all(row is not None and row.status is JobStatus.SUCCEEDED for row in rows)
    assert all(row is not None and row.attempts_used == 1 for row in rows)
    first_try: list[datetime] = []  # starts of the jobs admitted without waiting
    for job, row in zip(jobs, rows, strict=True):
        assert [a.outcome for a in await backend.get_attempts(job.id)] == ["succeeded"]
        events = await backend.get_events(job.id)
        denials = [e for e in events if e.detail.get("reason") == "rate_limit:api"]
        assert all(e.to_status is JobStatus.SCHEDULED for e in denials)
        if not denials and row is not None and row.started_at is not None:
            first_try.append(row.started_at)
    # A burst of 2 runs at once; beyond it a job ran without waiting only on a token that
    # refilled (10/s) while the first ones were admitted. The rest waited.
    assert len(first_try) < len(jobs)
    span = (max(first_try) - min(first_try)).total_seconds()
    assert len(first_try) <= 2 + 10 * span + 1
    # The bucket (2 at once, then 10/s) holds on the clock that stamped the starts.
    starts = [row.started_at for row in rows if row is not None and row.started_at]
    assert most_in_any_window(starts, timedelta(seconds=0.5)) <= 2 + 10 * 0.5 + 1
    # The worker recorded the limit it enforced, for readers without the code (top).
    [usage] = await backend.get_rate_limit_usage()
    assert (usage.limit.name, usage.limit.kind, usage.limit.capacity) == ("api", "token_bucket", 2)
    assert usage.limit.per_second == 10 and usage.limit.store == "postgres"


async def test_a_sliding_window_limit_is_enforced_by_the_worker(backend: Backend) -> None:
    jobs = [await backend.enqueue(EnqueueArgs("send_sms", {"n": n})) for n in range(5)]
    grants = record_grants(backend)
    assert await drain(backend, [send_sms]) == 0
    rows = [await backend.get(job.id) for job in jobs]
    assert all(row is not None and row.status is JobStatus.SUCCEEDED for row in rows)
    assert len(grants) >= len(jobs)  # a job given back unstarted is granted again
    assert most_units_surely_in_one_window(grants, timedelta(milliseconds=300)) <= 2, [
        (called.isoformat(), returned.isoformat()) for called, returned, _ in grants
    ]


async def test_unlimited_actors_are_not_held_back_beside_limited_ones(backend: Backend) -> None:
    free = [await backend.enqueue(EnqueueArgs("unlimited", {"n": n})) for n in range(20)]
    for n in range(6):
        await backend.enqueue(EnqueueArgs("call_api", {"n": n}))
    assert await drain(backend, [call_api, unlimited]) == 0
    for job in free:
        events = await backend.get_events(job.id)
        assert not [e for e in events if "reason" in e.detail]
        assert [a.outcome for a in await backend.get_attempts(job.id)] == ["succeeded"]


async def test_a_key_function_that_raises_fails_the_job_with_the_reason(
    backend: Backend,
) -> None:
    good = await backend.enqueue(EnqueueArgs("bill", {"tenant": "acme"}))
    bad = await backend.enqueue(EnqueueArgs("bill", {"tenant": "broken"}))
    assert await drain(backend, [bill]) == 3  # until-idle: some jobs failed
    ok, failed = await backend.get(good.id), await backend.get(bad.id)
    assert ok is not None and ok.status is JobStatus.SUCCEEDED and ok.result == "acme"
    assert failed is not None and failed.status is JobStatus.FAILED
    assert failed.error_class == "RateLimitKeyError"
    assert failed.error_message == (
        "key function of limit 'per_tenant' raised LookupError: tenant not found"
    )


async def test_an_unknown_limit_name_stops_the_worker_before_it_starts(
    backend: Backend,
) -> None:
    @actor(rate_limits=["not_registered"])
    async def orphan(payload: dict[str, Any]) -> None: ...

    await backend.enqueue(EnqueueArgs("orphan", {}))
    with pytest.raises(ConfigError, match=r"actor 'orphan': rate_limits names 'not_registered'"):
        await drain(backend, [orphan])
    assert await backend.list_workers() == []  # nothing registered: it never started
    [job] = await backend.list_jobs(JobFilter(actor="orphan"))
    assert job.status is JobStatus.PENDING


async def test_the_heartbeat_counts_the_live_workers_running_each_limited_actor(
    backend: Backend,
) -> None:
    for n in range(6):
        await backend.enqueue(EnqueueArgs("call_api", {"n": n}))
    running = worker(backend, [call_api, unlimited])
    assert await asyncio.wait_for(running.run(), 60) == 0
    assert running.deps is not None and running.deps.limiter is not None
    # Itself: it spaces its denials for a fleet of one (unlimited actors are not counted).
    assert running.deps.limiter.fleet == {"call_api": 1}
