"""Queues: every queue with jobs or a row is listed; settings are upserted field by field."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import QueueRow, Start
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, wait_set


async def test_there_are_no_queues_before_anything_happens(harness: Harness) -> None:
    assert await harness.backend.list_queues() == []
    assert await harness.backend.get_queue("default") is None


async def test_a_queue_with_jobs_but_no_row_is_listed_with_defaults(harness: Harness) -> None:
    await harness.backend.enqueue_batch([args(queue="media"), args(queue="media")])
    job = await harness.backend.enqueue(args(queue="media"))
    await harness.backend.write_cancel_request(job.id, None)
    expected = QueueRow(
        name="media",
        mode="strict_fifo",
        max_concurrent=None,
        paused=False,
        has_row=False,
        counts={JobStatus.PENDING: 2, JobStatus.CANCELLED: 1},
    )
    assert await harness.backend.list_queues() == [expected]
    assert await harness.backend.get_queue("media") == expected


async def test_counts_list_only_statuses_with_jobs_in_enum_order(harness: Harness) -> None:
    job = await harness.backend.enqueue(args(queue="q"))
    await harness.backend.write_cancel_request(job.id, None)
    await harness.backend.enqueue(args(queue="q", delay=timedelta(days=1)))
    await harness.backend.enqueue(args(queue="q"))
    row = await harness.backend.get_queue("q")
    assert row is not None
    assert list(row.counts.items()) == [
        (JobStatus.PENDING, 1),
        (JobStatus.SCHEDULED, 1),
        (JobStatus.CANCELLED, 1),
    ]


async def test_running_jobs_whose_bodies_have_not_started_are_counted_as_claimed(
    harness: Harness,
) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(3)])
    worker = uuid4()
    claimed = await harness.backend.dispatch_batch(worker, ["q"], 2, timedelta(minutes=1))
    await harness.backend.mark_started_many(worker, [Start(claimed[0].id, claimed[0].attempt)])
    row = await harness.backend.get_queue("q")
    assert row is not None
    assert (row.counts, row.claimed) == ({JobStatus.PENDING: 1, JobStatus.RUNNING: 2}, 1)
    assert await harness.backend.list_queues() == [row]


async def test_a_queue_row_without_jobs_is_listed(harness: Harness) -> None:
    row = await harness.backend.update_queue("idle", paused=True)
    assert row.pause is not None  # every pause records when
    assert row == QueueRow("idle", "strict_fifo", None, True, True, {}, pause=row.pause)
    assert await harness.backend.list_queues() == [row]


async def test_queues_are_listed_by_name(harness: Harness) -> None:
    await harness.backend.enqueue(args(queue="zeta"))
    await harness.backend.update_queue("alpha", mode="round_robin")
    await harness.backend.enqueue(args(queue="mid"))
    await harness.backend.update_queue("mid", max_concurrent=4)
    rows = await harness.backend.list_queues()
    assert [row.name for row in rows] == ["alpha", "mid", "zeta"]
    assert [row.has_row for row in rows] == [True, True, False]
    assert rows[1].counts == {JobStatus.PENDING: 1}


async def test_update_queue_changes_only_the_fields_given(harness: Harness) -> None:
    backend = harness.backend
    created = await backend.update_queue("q", mode="round_robin", max_concurrent=5)
    assert (created.mode, created.max_concurrent, created.paused) == ("round_robin", 5, False)
    paused = await backend.update_queue("q", paused=True)
    assert (paused.mode, paused.max_concurrent, paused.paused) == ("round_robin", 5, True)
    cleared = await backend.update_queue("q", max_concurrent=None)
    assert (cleared.mode, cleared.max_concurrent, cleared.paused) == ("round_robin", None, True)
    back = await backend.update_queue("q", mode="strict_fifo", paused=False)
    assert (back.mode, back.max_concurrent, back.paused) == ("strict_fifo", None, False)
    assert await backend.get_queue("q") == back


async def test_update_queue_returns_the_job_counts_too(harness: Harness) -> None:
    await harness.backend.enqueue(args(queue="q"))
    row = await harness.backend.update_queue("q", max_concurrent=1)
    assert row.has_row and row.counts == {JobStatus.PENDING: 1}


@pytest.mark.parametrize(
    "bad", [{"mode": "lifo"}, {"max_concurrent": -1}], ids=["mode", "max_concurrent"]
)
async def test_invalid_queue_settings_are_rejected(
    harness: Harness, bad: dict[str, object]
) -> None:
    with pytest.raises(ValueError):
        await harness.backend.update_queue("q", **bad)  # type: ignore[arg-type]
    assert await harness.backend.get_queue("q") is None


async def test_resuming_a_queue_wakes_the_subscribers(harness: Harness) -> None:
    await harness.backend.update_queue("q", paused=True)
    await harness.backend.enqueue(args(queue="q"))
    async with harness.backend.subscribe_wake() as woken:
        await harness.backend.update_queue("q", paused=False)
        await wait_set(woken)


async def test_a_pause_records_who_when_and_why_and_a_resume_clears_it(harness: Harness) -> None:
    backend = harness.backend
    before = await harness.now()
    paused = await backend.update_queue(
        "noted", paused=True, paused_by="alice@ops-1", pause_reason="db maintenance"
    )
    after = await harness.now()
    assert paused.pause is not None
    assert (paused.pause.paused_by, paused.pause.reason) == ("alice@ops-1", "db maintenance")
    assert before <= paused.pause.paused_at <= after
    assert (await backend.get_queue("noted")) == paused
    assert [q.pause for q in await backend.list_queues() if q.name == "noted"] == [paused.pause]
    capped = await backend.update_queue("noted", max_concurrent=3)
    assert capped.pause == paused.pause  # other settings keep the note
    again = await backend.update_queue("noted", paused=True, paused_by="bob@ops-2")
    assert again.pause is not None and (again.pause.paused_by, again.pause.reason) == (
        "bob@ops-2",
        None,
    )
    resumed = await backend.update_queue("noted", paused=False, paused_by="ignored")
    assert (resumed.paused, resumed.pause) == (False, None)
    plain = await backend.update_queue("plain", paused=True)
    assert plain.pause is not None and (plain.pause.paused_by, plain.pause.reason) == (None, None)
