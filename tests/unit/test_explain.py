"""explain_job names the blocker that applies, in dispatch order, with the fact behind it.

Runs on the in-memory backend with a FakeClock, so staleness and schedules are exact.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import (
    ActorDeclaration,
    EnqueueArgs,
    ErrorInfo,
    PrunePolicy,
    Start,
    WorkerInfo,
)
from taskq_core.clock import FakeClock
from taskq_core.errors import JobNotFoundError
from taskq_core.explain import ExplainSettings, Explanation, explain_job
from taskq_core.statemachine import JobStatus
from tests.workflow_seed import make_diamond, run_step

LEASE = timedelta(seconds=60)
SETTINGS = ExplainSettings(
    worker_stale_after=timedelta(seconds=40), cancel_reclaim_headroom=timedelta(seconds=100)
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


async def live_worker(
    backend: InMemoryBackend,
    queues: list[str],
    actors: list[str],
    concurrency: int = 4,
) -> UUID:
    """Register a worker that consumes ``queues`` with ``actors``; returns its id."""
    worker = uuid4()
    await backend.register_worker(
        WorkerInfo(worker, "host-a", 4242, queues, actors, concurrency, label="web")
    )
    return worker


async def explain(backend: InMemoryBackend, job_id: UUID) -> Explanation:
    return await explain_job(backend, job_id, SETTINGS)


def applying(explanation: Explanation) -> list[str]:
    return [check.code for check in explanation.checks if check.applies]


async def test_an_unknown_job_raises_job_not_found(backend: InMemoryBackend) -> None:
    with pytest.raises(JobNotFoundError, match="no job with id"):
        await explain(backend, uuid4())


async def test_a_due_job_with_a_free_live_worker_is_runnable(backend: InMemoryBackend) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await live_worker(backend, ["q"], ["work"])
    explanation = await explain(backend, job.id)
    assert explanation.situation == "waiting"
    assert applying(explanation) == []
    assert explanation.verdict.code == "runnable"
    assert [c.code for c in explanation.checks] == [
        "deadline_passed",
        "rate_limited",
        "scheduled",
        "queue_paused",
        "actor_on_other_queue",
        "no_live_worker",
        "actor_not_registered",
        "workers_busy",
        "queue_capacity_full",
        "actor_capacity_full",
        "identity_key_held",
        "waiting_turn",
    ]


async def test_a_job_scheduled_for_later_names_the_time(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q", delay=timedelta(minutes=5)))
    await live_worker(backend, ["q"], ["work"])
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "scheduled"
    assert job.scheduled_at.isoformat(timespec="seconds") in explanation.verdict.message
    assert "in 5m" in explanation.verdict.message


async def test_a_due_scheduled_job_without_a_leader_says_nothing_promotes_it(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q", delay=timedelta(seconds=5)))
    clock.advance(10)
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "scheduled"
    assert "no live worker is leading" in explanation.verdict.message


async def test_a_paused_queue_blocks_before_workers_are_considered(
    backend: InMemoryBackend,
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await backend.update_queue("q", paused=True)
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "queue_paused"
    assert applying(explanation)[:2] == ["queue_paused", "no_live_worker"]


async def test_a_paused_queue_says_who_paused_it_when_and_why(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await backend.update_queue("q", paused=True, paused_by="ops@box", pause_reason="smtp down")
    clock.advance(180)
    verdict = (await explain(backend, job.id)).verdict
    assert verdict.code == "queue_paused"
    assert "paused, 3m ago by ops@box: smtp down" in verdict.message
    assert (verdict.facts["by"], verdict.facts["why"]) == ("ops@box", "smtp down")


async def test_a_queue_no_live_worker_consumes_names_the_stale_ones(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    stale = await live_worker(backend, ["q"], ["work"])
    await live_worker(backend, ["other"], ["work"])
    clock.advance(120)
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "no_live_worker"
    assert "1 worker that consumed it last seen 2m ago" in explanation.verdict.message
    assert explanation.verdict.facts["stale_workers"] == [stale]


async def test_live_consumers_without_the_actor_are_a_blocker(backend: InMemoryBackend) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await live_worker(backend, ["q"], ["something_else"])
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "actor_not_registered"
    assert "registers actor 'work'" in explanation.verdict.message


async def test_a_job_outside_its_registered_actors_queue_names_the_mismatch(
    backend: InMemoryBackend,
) -> None:
    # Enqueued by name before any worker registered the actor: it landed in 'default'.
    job = await backend.enqueue(EnqueueArgs("resize", queue="default"))
    await backend.sync_actor_configs(
        [ActorDeclaration("resize", "media", {}, None, None, None)], force=False
    )
    await live_worker(backend, ["media"], ["resize"])
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "actor_on_other_queue"
    assert applying(explanation)[:2] == ["actor_on_other_queue", "no_live_worker"]
    assert explanation.verdict.message.startswith(
        "actor 'resize' is registered on queue 'media', but this job waits in queue 'default'"
    )
    assert explanation.verdict.facts == {"actor_queue": "media", "job_queue": "default"}


async def test_a_worker_of_the_jobs_queue_with_the_actor_clears_the_mismatch(
    backend: InMemoryBackend,
) -> None:
    job = await backend.enqueue(EnqueueArgs("resize", queue="default"))
    await backend.sync_actor_configs(
        [ActorDeclaration("resize", "media", {}, None, None, None)], force=False
    )
    await live_worker(backend, ["media", "default"], ["resize"])
    explanation = await explain(backend, job.id)
    assert applying(explanation) == []
    check = next(c for c in explanation.checks if c.code == "actor_on_other_queue")
    assert "a live worker consuming 'default' registers it too" in check.message


async def test_consumers_at_full_concurrency_are_a_blocker(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q"], ["work"], concurrency=1)
    await backend.enqueue(EnqueueArgs("work", queue="q"))
    [busy] = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
    await backend.mark_started_many(worker, [Start(busy.id, busy.attempt)])  # its body runs
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "workers_busy"
    assert "(1/1 jobs)" in explanation.verdict.message


async def test_a_full_queue_cap_names_its_running_jobs(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    await backend.update_queue("q", max_concurrent=1)
    await backend.enqueue(EnqueueArgs("work", queue="q"))
    (running,) = await backend.dispatch_batch(worker, ["q"], 4, LEASE)
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "queue_capacity_full"
    assert f"max_concurrent 1 (1 running job): running {running.id}" in (
        explanation.verdict.message
    )


async def test_a_full_actor_cap_names_its_running_jobs(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q", "elsewhere"], ["work"])
    await backend.sync_actor_configs(
        [ActorDeclaration("work", "q", {}, 1, None, None)], force=False
    )
    await backend.enqueue(EnqueueArgs("work", queue="elsewhere"))
    (running,) = await backend.dispatch_batch(worker, ["elsewhere"], 4, LEASE)
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "actor_capacity_full"
    assert "actor 'work' is at its max_concurrent 1" in explanation.verdict.message
    assert str(running.id) in explanation.verdict.message
    assert explanation.verdict.facts["running_job_ids"] == [running.id]


async def test_another_job_holding_the_identity_key_is_named(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    await backend.enqueue(EnqueueArgs("work", queue="q", identity_key="user-7"))
    (holder,) = await backend.dispatch_batch(worker, ["q"], 4, LEASE)
    job = await backend.enqueue(EnqueueArgs("work", queue="q", identity_key="user-7"))
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "identity_key_held"
    assert f"job {holder.id} holds identity key 'user-7'" in explanation.verdict.message


async def test_round_robin_waits_its_turn_behind_other_cohorts(backend: InMemoryBackend) -> None:
    await live_worker(backend, ["q"], ["work"])
    await backend.update_queue("q", mode="round_robin")
    for _ in range(3):
        await backend.enqueue(EnqueueArgs("work", queue="q", fairness_key="tenant-a"))
    await backend.enqueue(EnqueueArgs("work", queue="q", fairness_key="tenant-b"))
    second_b = await backend.enqueue(EnqueueArgs("work", queue="q", fairness_key="tenant-b"))
    explanation = await explain(backend, second_b.id)
    assert explanation.verdict.code == "waiting_turn"
    # Rank 1 of a and b, then rank 2 of a: three ahead, two of them from tenant-a.
    assert "behind 2 jobs of other cohorts (3 ahead in all" in explanation.verdict.message


async def test_strict_fifo_waits_behind_the_older_jobs(backend: InMemoryBackend) -> None:
    await live_worker(backend, ["q"], ["work"])
    await backend.enqueue_batch([EnqueueArgs("work", queue="q") for _ in range(4)])
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "waiting_turn"
    assert "behind 4 jobs of queue 'q'" in explanation.verdict.message


async def test_a_passed_deadline_comes_first(backend: InMemoryBackend, clock: FakeClock) -> None:
    job = await backend.enqueue(
        EnqueueArgs("work", queue="q", schedule_to_close=timedelta(seconds=30))
    )
    await backend.update_queue("q", paused=True)
    clock.advance(60)
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "deadline_passed"
    assert "DeadlineExceeded" in explanation.verdict.message


async def test_a_job_running_on_a_live_worker_is_just_running(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await backend.dispatch_batch(worker, ["q"], 1, LEASE)
    explanation = await explain(backend, job.id)
    assert explanation.situation == "running"
    assert explanation.verdict.code == "running"
    assert f"worker {worker} (host-a pid 4242)" in explanation.verdict.message


async def test_a_job_on_a_stale_worker_names_when_reclaim_is_due(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    (running,) = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
    clock.advance(45)
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "worker_stale"
    assert "last seen 45s ago (stale after 40s)" in explanation.verdict.message
    assert running.lock_expires_at is not None
    reclaim = running.lock_expires_at.isoformat(timespec="seconds")
    assert f"reclaim due at {reclaim} (in 15s)" in explanation.verdict.message
    assert explanation.verdict.facts["reclaim_at"] == running.lock_expires_at


async def test_an_overdue_reclaim_without_a_leader_says_so(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await backend.dispatch_batch(worker, ["q"], 1, LEASE)
    await backend.write_cancel_request(job.id, "stop")
    clock.advance(300)
    explanation = await explain(backend, job.id)
    assert "reclaim overdue since" in explanation.verdict.message
    assert "no live leader runs the reclaim sweep" in explanation.verdict.message


async def test_a_failed_job_names_its_last_error_and_attempts(backend: InMemoryBackend) -> None:
    worker = await live_worker(backend, ["q"], ["work"])
    job = await backend.enqueue(EnqueueArgs("work", queue="q", max_attempts=3))
    [claimed] = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
    await backend.mark_failed_or_retry(claimed.lease(), ErrorInfo("ValueError", "boom"), None)
    explanation = await explain(backend, job.id)
    assert explanation.situation == "terminal"
    message = explanation.verdict.message
    assert "it failed" in message and "last error ValueError: boom" in message
    assert "1 of 3 attempt(s) used" in message
    assert f"taskq retry {job.id}" in message


async def test_a_cancelled_job_names_the_reason(backend: InMemoryBackend) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    await backend.write_cancel_request(job.id, "duplicate order")
    explanation = await explain(backend, job.id)
    assert explanation.verdict.code == "terminal"
    assert "cancelled" in explanation.verdict.message
    assert "(reason: duplicate order)" in explanation.verdict.message


def test_stale_after_follows_the_worker_heartbeat_settings() -> None:
    from taskq_core.settings import TaskqSettings

    settings = TaskqSettings.load(heartbeat_interval=5, max_heartbeat_failures=2)
    derived = ExplainSettings.from_settings(settings)
    assert derived.worker_stale_after == timedelta(seconds=15)
    assert derived.cancel_reclaim_headroom == timedelta(seconds=30 + 10 + 60)


async def test_an_archived_job_is_explained_as_archived(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    job = await backend.enqueue(EnqueueArgs("work", queue="q"))
    assert await backend.write_cancel_request(job.id, "not needed") == "cancelled"
    clock.advance(timedelta(days=2).total_seconds())
    policy = PrunePolicy({JobStatus.CANCELLED: timedelta(days=1)}, timedelta(days=30))
    assert (await backend.prune_jobs(policy)).total == 1
    archived = await backend.get_archived_job(job.id)
    assert archived is not None

    explanation = await explain(backend, job.id)
    assert explanation.situation == "archived"
    assert explanation.now is None
    verdict = explanation.verdict
    assert verdict.code == "archived" and applying(explanation) == ["archived"]
    assert verdict.message.startswith("it is archived: it was cancelled at ")
    assert f"archive at {archived.archived_at.isoformat(timespec='seconds')}" in verdict.message
    assert "nothing will run it" in verdict.message
    assert f"deletes it at {archived.expire_at.isoformat(timespec='seconds')}" in verdict.message
    assert verdict.facts["archived_at"] == archived.archived_at
    assert verdict.facts["expire_at"] == archived.expire_at


async def test_a_waiting_step_a_failed_dependency_cancels_waits_for_the_sweep(
    backend: InMemoryBackend,
) -> None:
    run = await make_diamond(backend)
    await run_step(backend, run, "extract")
    await run_step(backend, run, "t1", "failed", release=False)  # its hook never ran
    explanation = await explain(backend, run.jobs["load"])
    assert explanation.verdict.code == "workflow_dependencies"
    assert explanation.verdict.message == (
        "it is a workflow step that waits for nothing: a dependency did not succeed "
        "(t1 failed, t2 pending); the release was lost and the leader's sweep decides the "
        "step at its next pass"
    )
    assert explanation.verdict.facts["waiting_for"] == ["t2"]
    await backend.release_stale_workflow_steps()
    load = await backend.get(run.jobs["load"])
    assert load is not None and load.status is JobStatus.CANCELLED
