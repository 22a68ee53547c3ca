"""Payload limits and listings, alike on both backends (issue 33).

Every enqueue refuses a payload whose JSON text is over the backend's ``max_payload_bytes``
(TASKQ_MAX_PAYLOAD_BYTES) with PayloadTooLargeError naming both sizes, and inserts nothing:
one job, a batch, the bulk path, a batch's finalizer, a cron schedule's payload (made by
an operator or declared in code). The
listings (``search_jobs``, ``list_recent_jobs``, ``list_batch_jobs``) are JobSummary rows:
no payload, result or traceback; ``get`` has them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from taskq_core import jsontext
from taskq_core.backend.protocol import (
    EnqueueArgs,
    JobFilter,
    JobRow,
    JobSummary,
    NewBatch,
    ScheduleSpec,
    ScheduleUpdate,
)
from taskq_core.backend.protocol.admin import JobQuery
from taskq_core.constants import DEFAULT_MAX_PAYLOAD_BYTES
from taskq_core.errors import PayloadTooLargeError
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, args, job_in, new_queue, running_job

LIMIT = DEFAULT_MAX_PAYLOAD_BYTES
# ``{"blob": "..."}``: the text around the blob.
_WRAPPING = len(jsontext.encode({"blob": ""}))


def payload_of(size: int) -> dict[str, str]:
    """A payload whose JSON text is exactly ``size`` bytes."""
    document = {"blob": "x" * (size - _WRAPPING)}
    assert len(jsontext.encode(document)) == size
    return document


def assert_names_both_sizes(exc: PayloadTooLargeError, size: int) -> None:
    message = str(exc)
    assert (exc.size, exc.limit) == (size, LIMIT)
    assert f"{size:,} bytes" in message and f"{LIMIT:,} bytes" in message, message
    assert "TASKQ_MAX_PAYLOAD_BYTES" in message


async def jobs_stored(harness: Harness) -> int:
    return len(await harness.backend.list_jobs(JobFilter(limit=None)))


def test_the_default_limit_is_one_mebibyte(harness: Harness) -> None:
    assert harness.backend.max_payload_bytes == 1024 * 1024  # type: ignore[attr-defined]


async def test_a_payload_at_the_limit_is_stored_one_byte_more_is_refused(
    harness: Harness,
) -> None:
    backend = harness.backend
    stored = await backend.enqueue(args(payload=payload_of(LIMIT)))
    reread = await backend.get(stored.id)
    assert reread is not None and reread.payload == payload_of(LIMIT)
    with pytest.raises(PayloadTooLargeError) as refused:
        await backend.enqueue(args(actor="resize", payload=payload_of(LIMIT + 1)))
    assert_names_both_sizes(refused.value, LIMIT + 1)
    assert "'resize'" in str(refused.value)
    assert await jobs_stored(harness) == 1


@pytest.mark.parametrize("path", ["enqueue_batch", "enqueue_batch_fast"])
async def test_one_oversized_item_refuses_the_whole_batch(harness: Harness, path: str) -> None:
    items = [args(), args(payload=payload_of(LIMIT + 10)), args()]
    with pytest.raises(PayloadTooLargeError) as refused:
        await getattr(harness.backend, path)(items)
    assert_names_both_sizes(refused.value, LIMIT + 10)
    assert await jobs_stored(harness) == 0


async def test_an_oversized_payload_in_the_callers_transaction_is_refused(
    harness: Harness,
) -> None:
    backend = harness.backend
    with pytest.raises(PayloadTooLargeError):
        async with backend.transaction() as conn:
            await backend.enqueue(args(), connection=conn)
            await backend.enqueue(args(payload=payload_of(LIMIT + 1)), connection=conn)
    assert await jobs_stored(harness) == 0


async def test_a_batch_whose_finalizer_is_oversized_is_refused_before_its_row(
    harness: Harness,
) -> None:
    batch_id = uuid7()
    finalizer = EnqueueArgs(actor="summarize", payload=payload_of(LIMIT + 1), job_id=uuid7())
    batch = NewBatch(batch_id, new_queue(), 1, finalizer=finalizer)
    with pytest.raises(PayloadTooLargeError) as refused:
        await harness.backend.create_batch(batch)
    assert_names_both_sizes(refused.value, LIMIT + 1)
    assert await harness.backend.get_batch(batch_id) is None


async def test_a_schedule_with_an_oversized_payload_is_refused(harness: Harness) -> None:
    backend = harness.backend
    big = payload_of(LIMIT + 1)
    with pytest.raises(PayloadTooLargeError):
        await backend.create_schedule(ScheduleSpec("nightly", "report", "0 3 * * *", payload=big))
    assert await backend.list_schedules() == []
    await backend.create_schedule(ScheduleSpec("nightly", "report", "0 3 * * *"))
    with pytest.raises(PayloadTooLargeError):
        await backend.update_schedule("nightly", ScheduleUpdate(payload=big))
    row = await backend.get_schedule("nightly")
    assert row is not None and row.payload == {}
    declared = ScheduleSpec("declared", "report", "0 3 * * *", payload=big)
    with pytest.raises(PayloadTooLargeError):  # a worker start's upsert of @cron schedules
        await backend.sync_code_schedules([declared])
    assert [r.name for r in await backend.list_schedules()] == ["nightly"]


async def test_listings_are_summaries_without_payload_result_or_traceback(
    harness: Harness,
) -> None:
    backend = harness.backend
    queue = new_queue()
    batch_id = uuid7()
    tag = {"batch_id": str(batch_id)}
    done, _ = await job_in(harness, JobStatus.SUCCEEDED, queue=queue, metadata=tag)
    failed, _ = await running_job(backend, queue=queue, metadata=tag, max_attempts=1)
    assert await backend.mark_failed_or_retry(failed.lease(), BOOM, None) is not None
    summaries: list[list[JobSummary]] = [
        (await backend.search_jobs(JobQuery(queues=(queue,)))).jobs,
        await backend.list_recent_jobs(JobFilter(queue=queue, limit=10)),
        await backend.list_batch_jobs(batch_id),
    ]
    for listed in summaries:
        assert {job.id for job in listed} == {done.id, failed.id}
        for job in listed:
            assert type(job) is JobSummary
            for heavy in ("payload", "result", "error_traceback"):
                assert not hasattr(job, heavy), heavy
        by_id = {job.id: job for job in listed}
        assert by_id[failed.id].error_class == "ValueError"
        assert by_id[failed.id].error_message == "boom"
        assert by_id[done.id].metadata == tag
    whole = await backend.get(done.id)
    assert type(whole) is JobRow and whole.result == {"ok": True} and whole.payload == {"n": 1}
    fail_row = await backend.get(failed.id)
    assert fail_row is not None and fail_row.error_traceback == "Traceback: boom"


async def test_a_summary_has_every_field_of_the_row_but_the_heavy_three(
    harness: Harness,
) -> None:
    job = await harness.backend.enqueue(
        args(queue=new_queue(), delay=timedelta(minutes=5), identity_key="k", priority=3)
    )
    [listed] = (await harness.backend.search_jobs(JobQuery(queues=(job.queue,)))).jobs
    whole = await harness.backend.get(job.id)
    assert whole is not None
    for name in JobSummary.__dataclass_fields__:
        assert getattr(listed, name) == getattr(whole, name), name
