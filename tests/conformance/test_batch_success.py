"""mark_succeeded_many: many completions in one write, with the same fences as one."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core import jsontext
from taskq_core.backend.protocol import Success
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, reload, running_job


async def test_batch_success_writes_each_owned_job_with_attempt_and_event(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    jobs = [(await running_job(backend, worker=worker))[0] for _ in range(5)]
    done = await backend.mark_succeeded_many(
        worker,
        [
            Success(
                j.id,
                j.attempt,
                jsontext.encode({"n": i}),
                fallback_result_ttl=timedelta(hours=1) if i == 0 else None,
            )
            for i, j in enumerate(jobs)
        ],
    )
    assert done == {j.id for j in jobs}
    for i, job in enumerate(jobs):
        row = await reload(backend, job.id)
        assert row.status is JobStatus.SUCCEEDED and row.result == {"n": i}
        assert row.finished_at is not None and row.lock_expires_at is None
        assert (row.result_expires_at is not None) == (i == 0)
        assert [a.outcome for a in await backend.get_attempts(job.id)] == ["succeeded"]
        events = [(e.from_status, e.to_status) for e in await backend.get_events(job.id)]
        assert events[-1] == (JobStatus.RUNNING, JobStatus.SUCCEEDED)


async def test_batch_success_skips_rows_the_worker_does_not_own(harness: Harness) -> None:
    backend = harness.backend
    mine, worker = await running_job(backend)
    theirs, _ = await running_job(backend)
    assert await backend.mark_succeeded_many(
        worker, [Success(mine.id, 1, None), Success(theirs.id, 1, '"stolen"')]
    ) == {mine.id}
    assert (await reload(backend, theirs.id)).status is JobStatus.RUNNING
    assert await backend.mark_succeeded_many(worker, [Success(mine.id, 1, None)]) == set()
    assert await backend.mark_succeeded_many(worker, []) == set()


async def test_a_job_listed_twice_is_settled_by_its_first_entry(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    listed_twice = [Success(job.id, 1, '"first"'), Success(job.id, 1, '"second"')]
    assert await backend.mark_succeeded_many(worker, listed_twice) == {job.id}
    assert (await reload(backend, job.id)).result == "first"
    assert [a.outcome for a in await backend.get_attempts(job.id)] == ["succeeded"]


async def test_has_active_jobs_tracks_waiting_and_running_work(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    assert await backend.has_active_jobs([job.queue]) is True
    assert await backend.has_active_jobs(["elsewhere"]) is False
    await backend.mark_succeeded_many(worker, [Success(job.id, job.attempt, None)])
    assert await backend.has_active_jobs([job.queue]) is False
    later = await backend.enqueue(args(queue=job.queue, delay=timedelta(hours=1)))
    assert await backend.has_active_jobs([later.queue]) is True


async def test_batch_success_skips_a_stale_attempt_and_writes_the_rest(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    stale, _ = await running_job(backend, worker=worker)
    fresh, _ = await running_job(backend, worker=worker)
    done = await backend.mark_succeeded_many(
        worker,
        [Success(stale.id, stale.attempt + 1, '"late"'), Success(fresh.id, fresh.attempt, "1")],
    )
    assert done == {fresh.id}
    assert await reload(backend, stale.id) == stale
    assert (await reload(backend, fresh.id)).result == 1


async def test_batch_success_dates_each_unrecorded_start_from_its_own_ran_for(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    jobs = [(await running_job(backend, worker=worker, started=False))[0] for _ in range(2)]
    before = await harness.now()
    successes = [
        Success(job.id, job.attempt, None, ran_for=s) for job, s in zip(jobs, (10, 70), strict=True)
    ]
    assert await backend.mark_succeeded_many(worker, successes) == {job.id for job in jobs}
    after = await harness.now()
    for job, seconds in zip(jobs, (10, 70), strict=True):
        started = (await reload(backend, job.id)).started_at
        ran = timedelta(seconds=seconds)
        assert started is not None and before - ran <= started <= after - ran
