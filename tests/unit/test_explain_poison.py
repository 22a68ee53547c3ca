"""explain_job names a poison job: the workers that died running it, and how to run it again.

Runs on the in-memory backend with a FakeClock (the reclaim sweep's lease expiry is exact).
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, ErrorInfo, JobRow, Start
from taskq_core.clock import FakeClock
from taskq_core.explain import explain_job

LEASE = timedelta(seconds=60)
GRACE = timedelta(seconds=5)


async def poison_job(backend: InMemoryBackend, clock: FakeClock) -> tuple[JobRow, list[UUID]]:
    """A job three workers died running: the default limit fails it as poison."""
    job = await backend.enqueue(EnqueueArgs("explode", queue="q", max_attempts=10))
    workers = []
    for _ in range(3):
        worker = uuid4()
        [claimed] = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
        await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
        workers.append(worker)
        clock.advance(LEASE.total_seconds() + 1)
        assert await backend.reclaim_expired_leases(GRACE, GRACE) == 1
    return job, workers


async def test_a_poison_job_names_the_workers_it_took_down() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    job, workers = await poison_job(backend, clock)
    explanation = await explain_job(backend, job.id)
    assert explanation.situation == "terminal"
    verdict = explanation.verdict
    assert verdict.code == "poison_job"
    assert verdict.message.startswith("it is a poison job: 3 workers died while running it (")
    assert all(str(worker) in verdict.message for worker in workers)
    assert f"taskq retry {job.id} runs it again" in verdict.message
    assert verdict.facts["crashed_workers"] == [str(w) for w in workers]
    assert verdict.facts["error_class"] == "PoisonJob"


async def test_a_job_failed_by_its_actor_is_no_poison_job() -> None:
    backend = InMemoryBackend(clock=FakeClock())
    job = await backend.enqueue(EnqueueArgs("explode", queue="q"))
    [claimed] = await backend.dispatch_batch(uuid4(), ["q"], 1, LEASE)
    await backend.mark_failed_or_retry(claimed.lease(), ErrorInfo("ValueError", "boom"), None)
    assert (await explain_job(backend, job.id)).verdict.code == "terminal"
