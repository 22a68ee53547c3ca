"""JobsClient over both backends: validation before insert, by-name enqueue, back-pressure."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel

from taskq_core.actors import JobContext, actor
from taskq_core.backend.protocol import ActorDeclaration, JobFilter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.errors import (
    JobNotFoundError,
    MaxPendingExceededError,
    PayloadValidationError,
    UnknownActorError,
)
from taskq_core.retry import RetryPolicy
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import LEASE


class Resize(BaseModel):
    url: str
    width: int


@actor(queue="media", priority=3, retry=RetryPolicy(kind="transient", max_attempts=5))
async def resize(payload: Resize, ctx: JobContext[Resize]) -> dict[str, bool]:
    return {"ok": True}


@actor(max_pending=2)
async def limited(payload: dict[str, Any]) -> None:
    return None


@actor(retry=RetryPolicy(kind="indefinite", time_budget=timedelta(hours=2)))
async def patient(payload: dict[str, Any]) -> None:
    return None


async def test_enqueue_by_ref_validates_and_uses_actor_options(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        job = await client.enqueue(resize, Resize(url="u", width=100))
        with pytest.raises(PayloadValidationError, match="width"):
            await client.enqueue(resize, {"url": "u", "width": "wide"})
    assert (job.queue, job.priority, job.retry_kind, job.max_attempts) == (
        "media",
        3,
        "transient",
        5,
    )
    assert job.payload == {"url": "u", "width": 100}
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 1


async def test_enqueue_by_name_needs_no_registry_and_follows_the_stored_queue(
    harness: Harness,
) -> None:
    await harness.backend.sync_actor_configs(
        [ActorDeclaration("resize", "media", {}, None, None, None)], force=False
    )
    async with JobsClient(backend=harness.backend) as client:
        known = await client.enqueue("resize", {"url": "u", "width": 1}, delay=5)
        unknown = await client.enqueue("brand_new", {"x": 1}, priority=9)
    assert known.queue == "media" and known.status is JobStatus.SCHEDULED
    assert unknown.queue == "default" and unknown.priority == 9


async def test_batch_and_fast_paths_insert_every_item(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        rows = await client.enqueue_batch(
            [(resize, Resize(url="a", width=1)), EnqueueItem("resize", {"url": "b", "width": 2})]
        )
        count = await client.enqueue_many_fast([(resize, {"url": "c", "width": 3})] * 5)
    assert [r.payload["url"] for r in rows] == ["a", "b"]
    assert count == 5
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 7


async def test_enqueue_by_name_takes_the_stored_retry_policy_and_priority(
    harness: Harness,
) -> None:
    """A process without the actor's code (the CLI, another service) gets its workers' policy."""
    flaky = ActorDeclaration(
        "flaky", "media", {}, None, None, None, "transient", 2, None, priority=4
    )
    patient_row = ActorDeclaration(
        "patient", "default", {}, None, None, None, "indefinite", 3, timedelta(hours=2), 0
    )
    await harness.backend.sync_actor_configs([flaky, patient_row], force=False)
    before = await harness.now()
    async with JobsClient(backend=harness.backend) as client:
        job = await client.enqueue("flaky", {})
        explicit = await client.enqueue("flaky", {}, queue="other", priority=9)
        (batched,) = await client.enqueue_batch([("flaky", {})])
        (deadline,) = await client.enqueue_batch([EnqueueItem("patient", {})])
        unknown = await client.enqueue("brand_new", {})
    assert (job.queue, job.retry_kind, job.max_attempts, job.priority) == (
        "media",
        "transient",
        2,
        4,
    )
    # Explicit options win; the policy is still the actor's.
    assert (explicit.queue, explicit.priority, explicit.max_attempts) == ("other", 9, 2)
    assert (batched.queue, batched.max_attempts, batched.priority) == ("media", 2, 4)
    assert deadline.retry_kind == "indefinite" and deadline.schedule_to_close is not None
    assert deadline.schedule_to_close - before >= timedelta(hours=2) - timedelta(seconds=1)
    assert (unknown.retry_kind, unknown.max_attempts, unknown.priority) == ("transient", 3, 0)


async def test_an_actor_registered_in_process_keeps_its_code_policy(harness: Harness) -> None:
    stored = ActorDeclaration("resize", "media", {}, None, None, None, "transient", 2, None, 0)
    await harness.backend.sync_actor_configs([stored], force=False)
    async with JobsClient(backend=harness.backend, registry=[resize]) as client:
        by_name = await client.enqueue("resize", {"url": "u", "width": 1})
        by_ref = await client.enqueue(resize, {"url": "u", "width": 1})
    assert (by_name.max_attempts, by_name.priority) == (5, 3)
    assert (by_ref.max_attempts, by_ref.priority) == (5, 3)


async def test_a_long_lived_client_follows_a_deploy_that_changes_the_policy(
    harness: Harness,
) -> None:
    async with JobsClient(backend=harness.backend, capacity_ttl=0) as client:
        before = await client.enqueue("flaky", {})
        await harness.backend.sync_actor_configs(
            [ActorDeclaration("flaky", "media", {}, None, None, None, "transient", 2, None, 0)],
            force=False,
        )
        after = await client.enqueue("flaky", {})
    assert (before.queue, before.max_attempts) == ("default", 3)
    assert (after.queue, after.max_attempts) == ("media", 2)


async def test_indefinite_time_budget_becomes_a_deadline(harness: Harness) -> None:
    before = await harness.now()
    async with JobsClient(backend=harness.backend) as client:
        job = await client.enqueue(patient, {})
    assert job.schedule_to_close is not None
    assert job.schedule_to_close - before >= timedelta(hours=2) - timedelta(seconds=1)


async def test_max_pending_back_pressure(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend, registry=[limited]) as client:
        await client.enqueue(limited, {})
        await client.enqueue("limited", {})
        with pytest.raises(MaxPendingExceededError, match="max_pending is 2"):
            await client.enqueue(limited, {})
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 2


async def test_stored_max_pending_wins_over_the_literal(harness: Harness) -> None:
    await harness.backend.sync_actor_configs(
        [ActorDeclaration("limited", "default", {}, None, 2, None)], force=False
    )
    await harness.backend.update_actor_config("limited", max_pending=5)
    async with JobsClient(backend=harness.backend, capacity_ttl=0) as client:
        client.register(limited)
        for _ in range(5):
            await client.enqueue(limited, {})
        with pytest.raises(MaxPendingExceededError):
            await client.enqueue(limited, {})


async def test_cancel_retry_get_and_wait(harness: Harness) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue("work", {"n": 1})
        assert await client.cancel(job.id, reason="no longer needed") == "cancelled"
        cancelled = await client.wait(job.id, timeout=5)
        assert cancelled.status is JobStatus.CANCELLED
        assert await client.retry(job.id) is True
        again = await client.get(job.id)
        assert again is not None and again.status is JobStatus.PENDING
        worker = uuid4()
        claimed = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
        assert [c.id for c in claimed] == [job.id]
        waiter = asyncio.create_task(client.wait(job.id, timeout=5))
        await backend.mark_succeeded(claimed[0].lease(), {"done": True})
        assert (await waiter).result == {"done": True}


async def test_unknown_ids_raise_job_not_found(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(JobNotFoundError):
            await client.cancel("0190a0a0-0000-7000-8000-000000000000")
        with pytest.raises(JobNotFoundError):
            await client.retry("not-a-uuid")
        with pytest.raises(TimeoutError):
            job = await client.enqueue("work", {}, delay=timedelta(hours=1))
            await client.wait(job.id, timeout=0.2)


async def test_transactional_enqueue_rolls_back_with_the_caller(harness: Harness) -> None:
    class Abort(Exception):
        pass

    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(Abort):
            async with harness.backend.transaction() as tx:
                await client.enqueue(resize, Resize(url="u", width=1), connection=tx)
                raise Abort
        async with harness.backend.transaction() as tx:
            kept = await client.enqueue(resize, Resize(url="v", width=2), connection=tx)
    assert [j.id for j in await harness.backend.list_jobs(JobFilter(limit=None))] == [kept.id]


async def test_a_client_that_was_never_opened_says_so(harness: Harness) -> None:
    client = JobsClient(backend=harness.backend)
    with pytest.raises(RuntimeError, match="not open"):
        await client.enqueue(resize, Resize(url="u", width=1))
    with pytest.raises(RuntimeError, match="not open"):
        await client.enqueue_many_fast([("by-name", {})])
    assert await harness.backend.list_jobs(JobFilter()) == []


async def test_a_strict_client_refuses_an_unregistered_actor_naming_the_closest(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.sync_actor_configs(
        [ActorDeclaration("flaky", "default", {}, None, None, None)], force=False
    )
    async with JobsClient(backend=backend, strict_actors=True) as client:
        with pytest.raises(UnknownActorError, match=r"'flakey' \(did you mean 'flaky'\?\)"):
            await client.enqueue("flakey", {})
        assert (await client.enqueue("flaky", {})).actor == "flaky"
    assert [job.actor for job in await backend.list_jobs(JobFilter(limit=None))] == ["flaky"]
    async with JobsClient(backend=backend) as lenient:  # the default lets it wait
        assert (await lenient.enqueue("flakey", {})).queue == "default"
