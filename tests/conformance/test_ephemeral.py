"""Ephemeral successes (``@actor(ephemeral=True)``): the job is deleted with its attempts and
events instead of kept as succeeded, under the same lease fence as any success."""

from __future__ import annotations

from uuid import UUID, uuid4

from taskq_core.backend.protocol import JobFilter, Success
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import reload, running_job


def success(job_id: UUID, attempt: int, *, ephemeral: bool) -> Success:
    return Success(job_id, attempt, '{"n": 1}', ephemeral=ephemeral)


async def test_an_ephemeral_success_leaves_no_row_attempt_or_event(harness: Harness) -> None:
    backend = harness.backend
    gone, worker = await running_job(backend)
    kept, _ = await running_job(backend, worker=worker, queue=gone.queue)
    written = await backend.mark_succeeded_many(
        worker,
        [success(gone.id, gone.attempt, ephemeral=True), success(kept.id, 1, ephemeral=False)],
    )
    assert written == {gone.id, kept.id}
    assert await backend.get(gone.id) is None
    assert await backend.get_attempts(gone.id) == []
    assert await backend.get_events(gone.id) == []
    row = await reload(backend, kept.id)  # its neighbour in the same call is kept as ever
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, {"n": 1})
    listed = await backend.list_jobs(JobFilter(queue=gone.queue))
    assert [job.id for job in listed] == [kept.id]


async def test_an_ephemeral_success_on_a_lost_lease_deletes_nothing(harness: Harness) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    assert await backend.mark_succeeded_many(uuid4(), [success(job.id, 1, ephemeral=True)]) == set()
    stale = success(job.id, job.attempt + 1, ephemeral=True)
    assert await backend.mark_succeeded_many(worker, [stale]) == set()
    assert (await reload(backend, job.id)).status is JobStatus.RUNNING
