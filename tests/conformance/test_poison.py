"""Poison jobs: a job whose worker died running it TASKQ_POISON_RECLAIMS times is failed by the
reclaim sweep instead of being handed to another worker (both backends)."""

from __future__ import annotations

from uuid import UUID, uuid4

from taskq_core.backend.protocol import JobRow, Start
from taskq_core.backend.protocol.admin import Audit
from taskq_core.constants import CANCEL_RECLAIM_HEADROOM, POISON_JOB_ERROR, UNSTARTED_RECLAIM_LIMIT
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import GRACE, LEASE, args, new_queue, reload, running_job

EXPIRED = LEASE.total_seconds() + 1
POISON = 3
MESSAGE = "3 workers died running it (TASKQ_POISON_RECLAIMS is 3); not handed out again"


async def crash(harness: Harness, job: JobRow, *, poison: int | None = POISON) -> JobRow:
    """The job's worker dies: its lease runs out and the leader reclaims it."""
    await harness.travel(EXPIRED)
    assert await harness.backend.reclaim_expired_leases(GRACE, GRACE, poison_reclaims=poison) == 1
    return await reload(harness.backend, job.id)


async def run_again(harness: Harness, job: JobRow) -> UUID:
    """A fresh worker claims the job and starts its body; returns that worker."""
    worker = uuid4()
    [claimed] = await harness.backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    assert claimed.id == job.id
    assert await harness.backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
    return worker


async def test_the_nth_crash_fails_the_job_as_poison(harness: Harness) -> None:
    backend = harness.backend
    job, first = await running_job(backend, max_attempts=10)
    workers = [first]
    for _ in range(POISON - 1):
        row = await crash(harness, job)
        assert (row.status, row.error_class) == (JobStatus.PENDING, "WorkerCrashed")
        workers.append(await run_again(harness, job))
    row = await crash(harness, job)
    assert row.status is JobStatus.FAILED
    assert (row.error_class, row.error_message) == (POISON_JOB_ERROR, MESSAGE)
    assert row.finished_at is not None and row.locked_by_worker is None
    # Not handed out again.
    assert await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE) == []
    attempts = await backend.get_attempts(job.id)
    assert [(a.outcome, a.error_class) for a in attempts] == [("crashed", "WorkerCrashed")] * 3
    assert [a.worker_id for a in attempts] == workers
    event = (await backend.get_events(job.id))[-1]
    assert (event.kind, event.from_status, event.to_status) == (
        "reclaim",
        JobStatus.RUNNING,
        JobStatus.FAILED,
    )
    assert event.detail == {
        "from_state": "running",
        "to_state": "failed",
        "reason": "lock_expired",
        "worker_id": str(workers[-1]),
        "started": True,
        "blamed": True,  # its body ran alone on that worker
        "poison": True,
        "crashes": 3,
    }


async def test_the_reclaim_feed_carries_the_poison_event(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=10)
    for _ in range(POISON - 1):
        await crash(harness, job)
        await run_again(harness, job)
    await crash(harness, job)
    await harness.travel(3)
    events = await harness.backend.poll_reclaim_events(0)
    assert [e.detail["to_state"] for e in events] == ["pending", "pending", "failed"]
    assert events[-1].detail["poison"] is True
    assert all("poison" not in e.detail for e in events[:-1])


async def test_poison_wins_over_a_spent_attempt_budget(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=POISON)
    for _ in range(POISON - 1):
        await crash(harness, job)
        await run_again(harness, job)
    row = await crash(harness, job)
    assert (row.status, row.error_class) == (JobStatus.FAILED, POISON_JOB_ERROR)


async def test_without_a_poison_limit_a_crashing_job_keeps_coming_back(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=10)
    for poison in (None, 0, None, 0):
        row = await crash(harness, job, poison=poison)
        assert row.status is JobStatus.PENDING
        await run_again(harness, job)


async def test_a_lower_limit_counts_the_crashes_already_made(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=10)
    await crash(harness, job, poison=None)
    await run_again(harness, job)
    row = await crash(harness, job, poison=2)
    assert row.status is JobStatus.FAILED
    assert row.error_message == (
        "2 workers died running it (TASKQ_POISON_RECLAIMS is 2); not handed out again"
    )


async def test_reclaims_of_a_job_whose_start_was_never_recorded_are_no_crashes(
    harness: Harness,
) -> None:
    # Past UNSTARTED_RECLAIM_LIMIT such a job counts as started (it uses attempts) but its
    # start is only assumed: a job prefetched by workers dying of another job looks the same.
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=20)
    for _ in range(UNSTARTED_RECLAIM_LIMIT + POISON + 1):
        row = await crash(harness, job)
        assert row.status is JobStatus.PENDING
        await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    reclaims = [e for e in await backend.get_events(job.id) if e.kind == "reclaim"]
    assumed = [e.detail.get("start_assumed", False) for e in reclaims]
    assert assumed == [False] * UNSTARTED_RECLAIM_LIMIT + [True] * (POISON + 1)
    assert (await reload(backend, job.id)).attempts_used == POISON + 2


async def test_assumed_starts_do_not_add_to_recorded_crashes(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=30)
    for _ in range(UNSTARTED_RECLAIM_LIMIT + 1):
        await crash(harness, job)
        await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    await crash(harness, job)
    for _ in range(POISON - 1):
        await run_again(harness, job)
        assert (await crash(harness, job)).status is JobStatus.PENDING
    await run_again(harness, job)
    row = await crash(harness, job)
    assert (row.status, row.error_class) == (JobStatus.FAILED, POISON_JOB_ERROR)


async def test_a_requested_cancel_wins_over_poison(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=10)
    for _ in range(POISON - 1):
        await crash(harness, job)
        await run_again(harness, job)
    assert await backend.write_cancel_request(job.id, "stop") == "requested"
    headroom = 2 * GRACE.total_seconds() + CANCEL_RECLAIM_HEADROOM.total_seconds()
    await harness.travel(EXPIRED + headroom)
    assert await backend.reclaim_expired_leases(GRACE, GRACE, poison_reclaims=POISON) == 1
    row = await reload(backend, job.id)
    assert row.status is JobStatus.CANCELLED
    assert row.error_class != POISON_JOB_ERROR


async def test_an_operator_requeue_is_no_crash(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=10)
    for _ in range(POISON + 1):
        result = await backend.end_running_job(job.id, "requeue", Audit(by="alice@ops"))
        assert result.settled and result.job is not None
        assert result.job.status is JobStatus.PENDING
        await run_again(harness, job)
    row = await crash(harness, job)
    assert row.status is JobStatus.PENDING


async def test_an_operator_retry_starts_the_count_again(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=10)
    for _ in range(POISON - 1):
        await crash(harness, job)
        await run_again(harness, job)
    assert (await crash(harness, job)).status is JobStatus.FAILED
    assert await backend.retry_job(job.id)
    await run_again(harness, job)
    for _ in range(POISON - 1):
        assert (await crash(harness, job)).status is JobStatus.PENDING
        await run_again(harness, job)
    row = await crash(harness, job)
    assert (row.status, row.error_class) == (JobStatus.FAILED, POISON_JOB_ERROR)


async def test_the_default_limit_is_three(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=10)
    statuses = []
    for _ in range(3):
        await harness.travel(EXPIRED)
        assert await harness.backend.reclaim_expired_leases(GRACE, GRACE) == 1
        row = await reload(harness.backend, job.id)
        statuses.append(row.status)
        if row.status is JobStatus.PENDING:
            await run_again(harness, job)
    assert statuses == [JobStatus.PENDING, JobStatus.PENDING, JobStatus.FAILED]


async def claim(harness: Harness, job: JobRow) -> JobRow:
    """A fresh worker claims the job (its body not started yet); the claimed row."""
    [claimed] = await harness.backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    assert claimed.id == job.id
    return claimed


async def test_a_new_job_was_never_reclaimed_unstarted(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    one = await backend.enqueue(args(queue=queue))
    [many] = await backend.enqueue_batch([args(queue=queue)])
    assert (one.unstarted_reclaims, many.unstarted_reclaims) == (0, 0)
    claimed = await backend.dispatch_batch(uuid4(), [queue], 2, LEASE)
    assert [row.unstarted_reclaims for row in claimed] == [0, 0]


async def test_a_job_reclaimed_unstarted_carries_the_count_on_its_next_claim(
    harness: Harness,
) -> None:
    # The count tells its next worker to record the start before the body runs.
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=10)
    row = await crash(harness, job)
    assert (row.status, row.attempts_used, row.unstarted_reclaims) == (JobStatus.PENDING, 0, 1)
    assert (await claim(harness, job)).unstarted_reclaims == 1
    assert (await crash(harness, job)).unstarted_reclaims == 2
    claimed = await claim(harness, job)
    assert claimed.unstarted_reclaims == 2
    # A reclaim of a started body is a crash, not an unstarted give-back: the count stays.
    worker = claimed.lease().worker_id
    assert await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)]) == {job.id}
    row = await crash(harness, job)
    assert (row.status, row.error_class, row.unstarted_reclaims) == (
        JobStatus.PENDING,
        "WorkerCrashed",
        2,
    )
    assert (await claim(harness, job)).unstarted_reclaims == 2


async def test_a_give_back_by_its_own_worker_is_not_counted(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend, started=False)
    assert await backend.release_leases(worker, [job.lease()], reason="shutdown_drain") == 1
    assert (await claim(harness, job)).unstarted_reclaims == 0


async def test_the_count_stops_at_the_unstarted_reclaim_limit(harness: Harness) -> None:
    # Past UNSTARTED_RECLAIM_LIMIT a reclaim counts as started (start_assumed): no give-back.
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=30)
    for _ in range(UNSTARTED_RECLAIM_LIMIT + 2):
        await crash(harness, job)
        await claim(harness, job)
    row = await reload(backend, job.id)
    assert (row.unstarted_reclaims, row.attempts_used) == (UNSTARTED_RECLAIM_LIMIT, 3)
    assert row.attempt == UNSTARTED_RECLAIM_LIMIT + 3  # one number per claim, none reused


async def test_a_job_first_reclaimed_unstarted_is_poison_once_its_started_runs_crash(
    harness: Harness,
) -> None:
    # What a worker does with the count: the body that killed its worker before the start
    # was written is reclaimed unstarted once; from then on each run's start is recorded
    # before the body, so its crashes count and the POISON-th fails it.
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=10)
    assert (await crash(harness, job)).status is JobStatus.PENDING
    for _ in range(POISON - 1):
        await run_again(harness, job)
        assert (await crash(harness, job)).status is JobStatus.PENDING
    await run_again(harness, job)
    row = await crash(harness, job)
    assert (row.status, row.error_class, row.error_message) == (
        JobStatus.FAILED,
        POISON_JOB_ERROR,
        MESSAGE,
    )
    reclaims = [e for e in await backend.get_events(job.id) if e.kind == "reclaim"]
    assert [e.detail["started"] for e in reclaims] == [False] + [True] * POISON
    # Those starts were written before the body: a death just before the call looks the same.
    assert [e.detail.get("start_before_body", False) for e in reclaims] == [False] + [True] * POISON


async def test_a_start_the_body_marked_is_not_written_before_the_body(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, max_attempts=10)
    await crash(harness, job)
    assert "start_before_body" not in await last_reclaim(harness, job)


async def reclaim_all(harness: Harness, expected: int) -> None:
    """Every held lease runs out and the leader reclaims them in one sweep."""
    await harness.travel(EXPIRED)
    assert (
        await harness.backend.reclaim_expired_leases(GRACE, GRACE, poison_reclaims=POISON)
        == expected
    )


async def last_reclaim(harness: Harness, job: JobRow) -> dict[str, object]:
    events = [e for e in await harness.backend.get_events(job.id) if e.kind == "reclaim"]
    return events[-1].detail


async def test_a_death_is_blamed_only_on_the_body_that_started_last(harness: Harness) -> None:
    """A worker that dies takes every body it ran with it, but at most one killed it: the
    one that started last (a job that kills its worker at once never lets another start)."""
    backend = harness.backend
    worker = uuid4()
    earlier, _ = await running_job(backend, worker=worker, max_attempts=10)
    await harness.travel(1)
    later, _ = await running_job(backend, worker=worker, max_attempts=10)
    unstarted, _ = await running_job(backend, worker=worker, started=False, max_attempts=10)
    await reclaim_all(harness, 3)
    assert (await last_reclaim(harness, earlier))["blamed"] is False
    assert (await last_reclaim(harness, later))["blamed"] is True
    assert "blamed" not in await last_reclaim(harness, unstarted)  # no body, no blame


async def test_bodies_whose_starts_one_call_marked_alike_blame_the_higher_id(
    harness: Harness,
) -> None:
    """Starts marked together with the same ran_for are one moment: the tie goes to the
    higher id, whatever order the call listed them or the database wrote them in."""
    backend, queue, worker = harness.backend, new_queue(), uuid4()
    for _ in range(3):
        await backend.enqueue(args(queue=queue, max_attempts=10))
    claimed = sorted(await backend.dispatch_batch(worker, [queue], 3, LEASE), key=lambda j: j.id)
    # A later write to the lowest id (Postgres: its row's newest version is stored last).
    await backend.heartbeat(worker, LEASE, [claimed[0].lease()])
    starts = [Start(job.id, job.attempt) for job in reversed(claimed)]
    assert await backend.mark_started_many(worker, starts) == {job.id for job in claimed}
    await reclaim_all(harness, 3)
    blamed = [job.id for job in claimed if (await last_reclaim(harness, job))["blamed"]]
    assert blamed == [max(job.id for job in claimed)]


async def test_deaths_a_job_only_happened_to_see_do_not_make_it_poison(harness: Harness) -> None:
    """A kill storm: the job is blamed twice, then its worker dies while another body started
    after it there, which breaks the row: two more blamed deaths are not yet the third in a
    row."""
    backend = harness.backend
    job, _ = await running_job(backend, max_attempts=20)
    for _ in range(POISON - 1):
        assert (await crash(harness, job)).status is JobStatus.PENDING
        await run_again(harness, job)
    worker = (await reload(backend, job.id)).locked_by_worker
    assert worker is not None
    await harness.travel(1)
    bystander, _ = await running_job(backend, worker=worker, max_attempts=10)  # started later
    await reclaim_all(harness, 2)
    assert (await reload(backend, job.id)).status is JobStatus.PENDING
    assert (await last_reclaim(harness, job))["blamed"] is False
    for _ in range(POISON - 1):
        await run_again(harness, job)
        assert (await crash(harness, job)).status is JobStatus.PENDING
    await run_again(harness, job)
    row = await crash(harness, job)  # the third blamed death in a row
    assert (row.status, row.error_class) == (JobStatus.FAILED, POISON_JOB_ERROR)
    assert (await reload(backend, bystander.id)).status is JobStatus.PENDING


async def test_a_blamed_job_goes_back_ahead_of_the_bodies_its_worker_died_with(
    harness: Harness,
) -> None:
    # One worker runs three bodies, started in claim order; it dies. The last started is
    # blamed, and it goes back first: on the next claim it starts before the other two, so a
    # second death of that worker's successor that is not its doing is not blamed on it.
    backend, queue, worker = harness.backend, new_queue(), uuid4()
    for n in range(3):
        await backend.enqueue(args(queue=queue, payload={"n": n}))
    claimed = await backend.dispatch_batch(worker, [queue], 3, LEASE)
    assert len(claimed) == 3
    ran = [Start(job.id, job.attempt, ran_for=0.3 - 0.1 * n) for n, job in enumerate(claimed)]
    assert await backend.mark_started_many(worker, ran) == {job.id for job in claimed}
    await harness.travel(EXPIRED)
    assert await backend.reclaim_expired_leases(GRACE, GRACE, poison_reclaims=POISON) == 3
    blamed = [(await backend.get_events(job.id))[-1].detail["blamed"] for job in claimed]
    assert blamed == [False, False, True]
    again = await backend.dispatch_batch(uuid4(), [queue], 3, LEASE)
    assert [job.id for job in again] == [claimed[2].id, claimed[0].id, claimed[1].id]
