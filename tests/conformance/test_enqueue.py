"""Enqueue: single, batch and fast paths, caller-owned transactions and the wake-up."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from taskq_core import jsontext
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, between, new_queue, wait_set


class Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


async def test_enqueue_returns_the_stored_pending_row(harness: Harness) -> None:
    before = await harness.now()
    job = await harness.backend.enqueue(
        EnqueueArgs(
            actor="resize",
            payload={"url": "u", "sizes": [1, 2]},
            queue="media",
            priority=7,
            identity_key="u",
            fairness_key="tenant-7",
            retry_kind="indefinite",
            max_attempts=5,
            result_ttl=timedelta(hours=1),
            metadata={"source": "test"},
            trace_id="t" * 32,
            span_id="s" * 16,
        )
    )
    after = await harness.now()
    assert job.status is JobStatus.PENDING
    assert (job.actor, job.queue, job.priority) == ("resize", "media", 7)
    assert job.payload == {"url": "u", "sizes": [1, 2]}
    assert (job.identity_key, job.fairness_key) == ("u", "tenant-7")
    assert (job.retry_kind, job.max_attempts) == ("indefinite", 5)
    assert job.result_ttl == timedelta(hours=1)
    assert job.metadata == {"source": "test"}
    assert (job.trace_id, job.span_id) == ("t" * 32, "s" * 16)
    assert between(job.scheduled_at, before, after)
    assert between(job.created_at, before, after)
    assert await harness.backend.get(job.id) == job


async def test_enqueue_fills_in_the_schema_defaults(harness: Harness) -> None:
    job = await harness.backend.enqueue(EnqueueArgs(actor="noop"))
    assert job.queue == "default"
    assert (job.priority, job.attempt, job.cancel_phase, job.progress_seq) == (0, 0, 0, 0)
    assert (job.retry_kind, job.max_attempts) == ("transient", 3)
    assert job.payload == {} and job.metadata == {}
    assert job.locked_by_worker is None and job.lock_expires_at is None
    assert job.started_at is None and job.finished_at is None
    assert job.result is None and job.error_class is None
    assert job.schedule_to_close is None and job.result_expires_at is None


async def test_a_delayed_job_is_scheduled_at_now_plus_the_delay(harness: Harness) -> None:
    before = await harness.now()
    job = await harness.backend.enqueue(args(delay=timedelta(minutes=5)))
    after = await harness.now()
    assert job.status is JobStatus.SCHEDULED
    assert between(job.scheduled_at, before + timedelta(minutes=5), after + timedelta(minutes=5))


async def test_a_zero_or_negative_delay_makes_the_job_pending(harness: Harness) -> None:
    zero = await harness.backend.enqueue(args(delay=timedelta(0)))
    negative = await harness.backend.enqueue(args(delay=timedelta(seconds=-5)))
    assert zero.status is JobStatus.PENDING
    assert negative.status is JobStatus.PENDING
    assert negative.scheduled_at <= await harness.now()


async def test_run_at_is_an_absolute_start_on_every_enqueue_path(harness: Harness) -> None:
    """A future ``run_at`` is the job's scheduled_at, to the microsecond, whichever path
    inserted it; one already past is due at once (pending, at the insert's now)."""
    now = await harness.now()
    later, past = now + timedelta(hours=3, microseconds=7), now - timedelta(hours=1)
    one = await harness.backend.enqueue(args(actor="one", run_at=later))
    [batch_later, batch_past] = await harness.backend.enqueue_batch(
        [args(actor="batch", run_at=later), args(actor="batch", run_at=past)]
    )
    await harness.backend.enqueue_batch_fast([args(actor="fast", run_at=later)])
    [fast] = await harness.backend.list_jobs(JobFilter(actor="fast"))
    for job in (one, batch_later, fast):
        stored = await harness.backend.get(job.id)
        assert stored is not None
        assert (job.status, job.scheduled_at) == (stored.status, stored.scheduled_at)
        assert (stored.status, stored.scheduled_at) == (JobStatus.SCHEDULED, later)
    assert batch_past.status is JobStatus.PENDING
    assert between(batch_past.scheduled_at, now, await harness.now())


async def test_schedule_to_close_is_a_deadline_relative_to_enqueue(harness: Harness) -> None:
    before = await harness.now()
    job = await harness.backend.enqueue(args(schedule_to_close=timedelta(hours=2)))
    after = await harness.now()
    assert between(job.schedule_to_close, before + timedelta(hours=2), after + timedelta(hours=2))


async def test_an_explicit_job_id_is_kept(harness: Harness) -> None:
    wanted = uuid7()
    job = await harness.backend.enqueue(args(job_id=wanted))
    assert job.id == wanted


async def test_backend_assigned_ids_are_time_ordered_uuids(harness: Harness) -> None:
    first = await harness.backend.enqueue(args())
    second = await harness.backend.enqueue(args())
    assert first.id.version == 7 and second.id.version == 7
    assert first.id < second.id


async def test_enqueue_records_no_event(harness: Harness) -> None:
    job = await harness.backend.enqueue(args())
    assert await harness.backend.get_events(job.id) == []
    assert await harness.backend.get_attempts(job.id) == []


async def test_enqueueing_the_same_job_id_twice_stores_one_job(harness: Harness) -> None:
    # A retried enqueue whose first answer was lost: the second call finds the first job.
    job_id = uuid7()
    first = await harness.backend.enqueue(args(job_id=job_id, payload={"n": (1, 2)}))
    second = await harness.backend.enqueue(args(job_id=job_id, payload={"n": (1, 2)}))
    assert second == first
    assert await harness.backend.list_jobs(JobFilter(limit=None)) == [first]


async def test_a_repeated_id_of_a_job_that_moved_on_returns_it_as_it_is_now(
    harness: Harness,
) -> None:
    queue = new_queue()
    job = await harness.backend.enqueue(args(queue=queue))
    await harness.backend.write_cancel_request(job.id, "operator")
    again = await harness.backend.enqueue(args(queue=queue, job_id=job.id))
    assert (again.id, again.status) == (job.id, JobStatus.CANCELLED)
    assert len(await harness.backend.list_jobs(JobFilter(limit=None))) == 1


@pytest.mark.parametrize(
    "other",
    [{"actor": "another"}, {"queue": "elsewhere"}, {"payload": {"n": 2}}],
    ids=["actor", "queue", "payload"],
)
async def test_an_id_that_belongs_to_another_job_raises_value_error(
    harness: Harness, other: dict[str, object]
) -> None:
    job = await harness.backend.enqueue(args())
    with pytest.raises(ValueError, match="already exists"):
        await harness.backend.enqueue(args(**{**other, "job_id": job.id}))  # type: ignore[arg-type]
    assert await harness.backend.list_jobs(JobFilter(limit=None)) == [job]


async def test_the_same_id_twice_in_the_callers_transaction_stores_one_job(
    harness: Harness,
) -> None:
    backend = harness.backend
    job_id = uuid7()
    async with backend.transaction() as tx:
        first = await backend.enqueue(args(job_id=job_id), connection=tx)
        second = await backend.enqueue(args(job_id=job_id), connection=tx)
    assert second.id == first.id == job_id
    assert [job.id for job in await backend.list_jobs(JobFilter(limit=None))] == [job_id]


@pytest.mark.parametrize(
    "bad", [{"max_attempts": 0}, {"retry_kind": "sometimes"}], ids=["max_attempts", "retry_kind"]
)
async def test_an_invalid_item_is_rejected_with_value_error(
    harness: Harness, bad: dict[str, object]
) -> None:
    with pytest.raises(ValueError):
        await harness.backend.enqueue(args(**bad))
    assert await harness.backend.list_jobs(JobFilter()) == []


async def test_json_payloads_round_trip_as_jsonb_would(harness: Harness) -> None:
    payload = {
        "text": 'tab\there "quoted" back\\slash\nnewline ünïcödé',
        "nested": {"list": [1, 2.5, None, True], "empty": {}},
        "tuple": (1, 2),
    }
    expected = {**payload, "tuple": [1, 2]}
    single = await harness.backend.enqueue(args(payload=payload))
    batch = await harness.backend.enqueue_batch([args(payload=payload, metadata=payload)])
    await harness.backend.enqueue_batch_fast([args(payload=payload, actor="fast")])
    fast = await harness.backend.list_jobs(JobFilter(actor="fast"))
    assert single.payload == expected
    assert batch[0].payload == expected and batch[0].metadata == expected
    assert fast[0].payload == expected
    assert (await harness.backend.get(single.id)) == single


UNSTORABLE = [
    pytest.param({"x": float("nan")}, "Out of range float", id="nan"),
    pytest.param({"x": [float("-inf")]}, "Out of range float", id="infinity"),
    pytest.param({"text": "a\x00b"}, "NUL character", id="nul-in-a-string"),
    pytest.param({"key\x00": 1}, "NUL character", id="nul-in-a-key"),
]


@pytest.mark.parametrize("column", ["payload", "metadata"])
@pytest.mark.parametrize(("value", "reason"), UNSTORABLE)
@pytest.mark.parametrize("path", ["enqueue", "enqueue_batch", "enqueue_batch_fast"])
async def test_an_unstorable_value_is_refused_the_same_way_by_every_enqueue_path(
    harness: Harness, path: str, value: dict[str, object], reason: str, column: str
) -> None:
    backend = harness.backend
    item = args(**{column: value})
    with pytest.raises(jsontext.UnstorableValueError, match=f"not storable as JSON: .*{reason}"):
        if path == "enqueue":
            await backend.enqueue(item)
        elif path == "enqueue_batch":
            await backend.enqueue_batch([args(), item])
        else:
            await backend.enqueue_batch_fast([args(), item])
    assert await backend.list_jobs(JobFilter()) == []


async def test_enqueue_batch_returns_one_row_per_item_in_order(harness: Harness) -> None:
    items = [args(payload={"i": i}, priority=i % 3) for i in range(25)]
    rows = await harness.backend.enqueue_batch(items)
    assert [row.payload["i"] for row in rows] == list(range(25))
    assert [row.priority for row in rows] == [i % 3 for i in range(25)]
    assert len({row.id for row in rows}) == 25
    listed = await harness.backend.list_jobs(JobFilter(limit=None))
    assert {row.id for row in listed} == {row.id for row in rows}


async def test_enqueue_batch_mixes_pending_and_scheduled_items(harness: Harness) -> None:
    rows = await harness.backend.enqueue_batch([args(), args(delay=timedelta(seconds=30))])
    assert [row.status for row in rows] == [JobStatus.PENDING, JobStatus.SCHEDULED]


async def test_empty_batches_insert_nothing(harness: Harness) -> None:
    assert await harness.backend.enqueue_batch([]) == []
    assert await harness.backend.enqueue_batch_fast([]) == 0
    assert await harness.backend.list_jobs(JobFilter()) == []


async def test_a_batch_with_an_invalid_item_inserts_nothing(harness: Harness) -> None:
    with pytest.raises(ValueError):
        await harness.backend.enqueue_batch([args(), args(max_attempts=0)])
    with pytest.raises(ValueError):
        await harness.backend.enqueue_batch_fast([args(), args(retry_kind="never")])
    assert await harness.backend.list_jobs(JobFilter()) == []


async def test_a_batch_reusing_an_existing_id_inserts_nothing(harness: Harness) -> None:
    taken = await harness.backend.enqueue(args())
    with pytest.raises(ValueError):
        await harness.backend.enqueue_batch([args(), args(job_id=taken.id)])
    assert [row.id for row in await harness.backend.list_jobs(JobFilter())] == [taken.id]


async def test_enqueue_batch_fast_inserts_every_item_and_returns_the_count(
    harness: Harness,
) -> None:
    queue = new_queue()
    count = await harness.backend.enqueue_batch_fast(
        [args(queue=queue, payload={"i": i}) for i in range(300)]
    )
    assert count == 300
    rows = await harness.backend.list_jobs(JobFilter(queue=queue, limit=None))
    assert sorted(row.payload["i"] for row in rows) == list(range(300))
    assert {row.status for row in rows} == {JobStatus.PENDING}


async def test_enqueue_batch_fast_resolves_delays_and_deadlines_on_the_backend_clock(
    harness: Harness,
) -> None:
    before = await harness.now()
    await harness.backend.enqueue_batch_fast(
        [
            args(actor="later", delay=timedelta(minutes=1), schedule_to_close=timedelta(hours=1)),
            args(actor="now", identity_key="k", fairness_key="f", priority=3),
        ]
    )
    after = await harness.now()
    [later] = await harness.backend.list_jobs(JobFilter(actor="later"))
    [now] = await harness.backend.list_jobs(JobFilter(actor="now"))
    assert later.status is JobStatus.SCHEDULED
    assert between(later.scheduled_at, before + timedelta(minutes=1), after + timedelta(minutes=1))
    assert between(later.schedule_to_close, before + timedelta(hours=1), after + timedelta(hours=1))
    assert now.status is JobStatus.PENDING
    assert (now.identity_key, now.fairness_key, now.priority) == ("k", "f", 3)


async def test_an_enqueue_rolled_back_with_the_callers_transaction_leaves_no_job(
    harness: Harness,
) -> None:
    backend = harness.backend
    with pytest.raises(Rollback):
        async with backend.transaction() as tx:
            job = await backend.enqueue(args(), connection=tx)
            raise Rollback
    assert await backend.get(job.id) is None
    assert await backend.list_jobs(JobFilter()) == []


async def test_an_enqueue_committed_with_the_callers_transaction_is_kept(
    harness: Harness,
) -> None:
    backend = harness.backend
    async with backend.transaction() as tx:
        job = await backend.enqueue(args(), connection=tx)
        rows = await backend.enqueue_batch([args(), args()], connection=tx)
        count = await backend.enqueue_batch_fast([args(actor="fast")], connection=tx)
    assert count == 1
    stored = await backend.list_jobs(JobFilter(limit=None))
    assert {row.id for row in stored} >= {job.id, *(row.id for row in rows)}
    assert len(stored) == 4


async def test_batches_roll_back_with_the_callers_transaction_too(harness: Harness) -> None:
    backend = harness.backend
    with pytest.raises(Rollback):
        async with backend.transaction() as tx:
            await backend.enqueue_batch([args(), args()], connection=tx)
            await backend.enqueue_batch_fast([args(), args()], connection=tx)
            raise Rollback
    assert await backend.list_jobs(JobFilter()) == []


async def test_a_pending_enqueue_wakes_the_subscribers(harness: Harness) -> None:
    async with harness.backend.subscribe_wake() as woken:
        await harness.backend.enqueue(args())
        await wait_set(woken)


async def test_a_batch_enqueue_wakes_the_subscribers(harness: Harness) -> None:
    async with harness.backend.subscribe_wake() as first, harness.backend.subscribe_wake() as other:
        await harness.backend.enqueue_batch_fast([args(), args()])
        await wait_set(first)
        await wait_set(other)


async def test_a_batch_wakes_the_subscribers_when_its_only_due_job_comes_last(
    harness: Harness,
) -> None:
    later = [args(delay=timedelta(hours=1)) for _ in range(2_400)]
    async with harness.backend.subscribe_wake() as woken:
        await harness.backend.enqueue_batch_fast(later)
        await asyncio.sleep(0.2)  # a wake would be delivered by now
        assert not woken.is_set()  # nothing is due: waking the workers would be for nothing
        await harness.backend.enqueue_batch_fast([*later[:2_000], args()])
        await wait_set(woken)


async def test_a_failed_batch_wakes_no_one(harness: Harness) -> None:
    async with harness.backend.subscribe_wake() as woken:
        with pytest.raises(ValueError):
            await harness.backend.enqueue_batch_fast(
                [args() for _ in range(2_000)] + [args(max_attempts=0)]
            )
        await asyncio.sleep(0.2)
        assert not woken.is_set()


async def test_a_committed_transactional_enqueue_wakes_the_subscribers(harness: Harness) -> None:
    async with harness.backend.subscribe_wake() as woken:
        async with harness.backend.transaction() as tx:
            await harness.backend.enqueue(args(), connection=tx)
        await wait_set(woken)
