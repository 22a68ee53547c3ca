"""``on_conflict`` on every backend: what an enqueue does when a job holds its unique key.
``return_existing`` answers with the holder; ``replace`` (debounce) gives a waiting holder the
new payload and start time, atomically against a claim, and still refuses a running one; the
backend's ``replace_waiting_job`` is the primitive under it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from taskq_core.backend.protocol import JobFilter
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.errors import ConfigError, SingletonCollisionError
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, between, job_in, reload

KEY = "report:7"


# --- the primitive ------------------------------------------------------------------------------
async def test_a_waiting_job_takes_the_new_payload_and_start(harness: Harness) -> None:
    backend = harness.backend
    job, _ = await job_in(harness, JobStatus.SCHEDULED)
    before = await harness.now()
    replaced = await backend.replace_waiting_job(job.id, args(payload={"n": 2}))
    assert replaced is not None and replaced.id == job.id
    assert (replaced.status, replaced.payload) == (JobStatus.PENDING, {"n": 2})
    assert between(replaced.scheduled_at, before, await harness.now())
    assert await reload(backend, job.id) == replaced
    later = await backend.replace_waiting_job(job.id, args(delay=timedelta(minutes=10)))
    assert later is not None and later.status is JobStatus.SCHEDULED
    events = [e for e in await backend.get_events(job.id) if e.kind == "replaced"]
    assert [(e.from_status, e.to_status) for e in events] == [
        (JobStatus.SCHEDULED, JobStatus.PENDING),
        (JobStatus.PENDING, JobStatus.SCHEDULED),
    ]


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
async def test_a_job_that_does_not_wait_is_left_alone(harness: Harness, status: JobStatus) -> None:
    job, _ = await job_in(harness, status)
    assert await harness.backend.replace_waiting_job(job.id, args(payload={"n": 9})) is None
    after = await reload(harness.backend, job.id)
    assert (after.status, after.payload, after.updated_at) == (status, job.payload, job.updated_at)


# --- the client ---------------------------------------------------------------------------------
async def test_return_existing_answers_with_the_holder(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        first = await client.enqueue("work", {"n": 1}, unique_key=KEY)
        again = await client.enqueue(
            "work", {"n": 2}, unique_key=KEY, on_conflict="return_existing"
        )
        [batched] = await client.enqueue_batch(
            [EnqueueItem("work", {"n": 3}, unique_key=KEY, on_conflict="return_existing")]
        )
    assert again.id == batched.id == first.id
    assert again.payload == {"n": 1}
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 1


async def test_replace_debounces_a_waiting_job_and_refuses_a_running_one(
    harness: Harness,
) -> None:
    backend = harness.backend
    async with JobsClient(backend=backend) as client:
        first = await client.enqueue("work", {"n": 1}, unique_key=KEY, delay=60)
        replaced = await client.enqueue(
            "work", {"n": 2}, unique_key=KEY, delay=600, on_conflict="replace"
        )
        assert (replaced.id, replaced.payload) == (first.id, {"n": 2})
        assert replaced.scheduled_at - first.scheduled_at > timedelta(minutes=8)

        running, _ = await job_in(harness, JobStatus.RUNNING, unique_key="busy")
        with pytest.raises(SingletonCollisionError) as info:
            await client.enqueue("work", {"n": 3}, unique_key="busy", on_conflict="replace")
        assert info.value.existing_job_id == running.id
    assert (await reload(backend, running.id)).payload == running.payload


async def test_a_holder_that_ended_frees_the_key_for_a_replace(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        done, _ = await job_in(harness, JobStatus.SUCCEEDED, unique_key=KEY)
        fresh = await client.enqueue("work", {"n": 2}, unique_key=KEY, on_conflict="replace")
    assert fresh.id != done.id and fresh.status is JobStatus.PENDING


async def test_a_batch_mixes_plain_and_resolving_items_in_one_transaction(
    harness: Harness,
) -> None:
    async with JobsClient(backend=harness.backend) as client:
        held = await client.enqueue("work", {"n": 1}, unique_key=KEY)
        rows = await client.enqueue_batch(
            [
                EnqueueItem("work", {"n": 2}),
                EnqueueItem("work", {"n": 3}, unique_key=KEY, on_conflict="replace"),
                ("work", {"n": 4}),
            ]
        )
        assert [row.payload for row in rows] == [{"n": 2}, {"n": 3}, {"n": 4}]
        assert rows[1].id == held.id
        with pytest.raises(SingletonCollisionError):  # a plain item's refusal: nothing stored
            await client.enqueue_batch(
                [
                    EnqueueItem("work", {"n": 5}, unique_key="other", on_conflict="replace"),
                    EnqueueItem("work", {"n": 6}, unique_key=KEY),
                ]
            )
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_conflict": "replace"}, "on_conflict='replace' needs a unique_key"),
        ({"unique_key": "k", "on_conflict": "merge"}, "on_conflict must be one of"),
    ],
)
async def test_bad_on_conflict_options_are_config_errors(
    harness: Harness, options: dict[str, str], message: str
) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(ConfigError, match=message):
            await client.enqueue("work", {"n": 1}, **options)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="tracked batch"):
            await client.enqueue_batch(
                [EnqueueItem("work", {}, unique_key="k", on_conflict="replace")], batch_id=None,
                failure_policy=None, finalizer=EnqueueItem("work", {}),
            )  # fmt: skip
    assert await harness.backend.list_jobs(JobFilter(limit=None)) == []
