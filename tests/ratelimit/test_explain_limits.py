"""``jobs explain`` names the rate limit or reservation that holds a job back, from the event
the worker's denial wrote, and stops naming it once the job is due again."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, JobRow, WorkerInfo
from taskq_core.clock import FakeClock
from taskq_core.explain import explain_job

LEASE = timedelta(seconds=60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


async def held_back(
    backend: InMemoryBackend, clock: FakeClock, reason: str, delay: float, times: int = 1
) -> JobRow:
    """A job a worker claimed and sent back ``times`` times with ``reason``."""
    job = await backend.enqueue(EnqueueArgs("charge", queue="q"))
    worker = uuid4()
    await backend.register_worker(WorkerInfo(worker, "host", 1, ["q"], ["charge"], 4))
    for _ in range(times):
        await backend.promote_scheduled_jobs()
        [claimed] = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
        outcome = await backend.mark_retry_after(
            claimed.lease(), timedelta(seconds=delay), consume_budget=False, reason=reason
        )
        assert outcome == "scheduled"
        if times > 1:
            clock.advance(delay)
    row = await backend.get(job.id)
    assert row is not None
    return row


async def test_a_job_a_rate_limit_holds_back_names_the_limit_and_when_it_runs(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await held_back(backend, clock, "rate_limit:payments", delay=30)
    explanation = await explain_job(backend, job.id)
    verdict = explanation.verdict
    assert verdict.code == "rate_limited"
    assert verdict.message.startswith("rate limit 'payments' holds it back: a worker claimed it")
    assert "the limit was used up" in verdict.message
    assert "in 30s" in verdict.message and "without using an attempt" in verdict.message
    assert (verdict.facts["limit"], verdict.facts["kind"]) == ("payments", "rate_limit")
    assert job.attempts_used == 0


async def test_a_reservation_without_a_free_slot_is_named_with_its_count(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await held_back(backend, clock, "reservation:gpu:pool-1", delay=1, times=3)
    clock.advance(-1)  # back before its last retry is due
    verdict = (await explain_job(backend, job.id)).verdict
    assert verdict.code == "rate_limited"
    assert verdict.message.startswith("reservation 'gpu:pool-1' holds it back")
    assert "every slot was held" in verdict.message and "(3 times so far)" in verdict.message
    assert verdict.facts["denials"] == 3


async def test_once_due_again_the_limit_is_history_not_the_blocker(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await held_back(backend, clock, "rate_limit:payments", delay=5)
    clock.advance(6)
    explanation = await explain_job(backend, job.id)
    [check] = [c for c in explanation.checks if c.code == "rate_limited"]
    assert not check.applies and "it is due again" in check.message
    assert explanation.verdict.code == "scheduled"  # due, waiting for the leader's promotion


async def test_a_job_never_held_back_says_so(backend: InMemoryBackend) -> None:
    job = await backend.enqueue(EnqueueArgs("charge", queue="q", delay=timedelta(minutes=1)))
    explanation = await explain_job(backend, job.id)
    [check] = [c for c in explanation.checks if c.code == "rate_limited"]
    assert not check.applies and check.message == "no rate limit or reservation holds it"
