"""Unique jobs on every backend: a key alone is held while its job waits or runs; a key with
``unique_for`` is held for its window (aligned on the Unix epoch) whatever the job's state; a
duplicate raises SingletonCollisionError naming the holder and inserts nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from taskq_core.backend.protocol import Backend, EnqueueArgs, JobFilter, JobRow
from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.backend.protocol.unique import windowed_key
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.errors import ConfigError, SingletonCollisionError
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, job_in, new_queue, reload
from tests.conformance.test_client_retry import Flaky

# Long windows: the Postgres clock runs while a test does, and a window boundary crossed
# between two enqueues of one test would free the key (once in millions of runs at 30 days).
WINDOW = timedelta(days=30)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def jobs_with(backend: Backend, key_prefix: str) -> list[JobRow]:
    """Every job whose stored unique key starts with ``key_prefix``."""
    rows = await backend.list_jobs(JobFilter(limit=None))
    return [row for row in rows if (row.unique_key or "").startswith(key_prefix)]


async def refused(backend: Backend, item: EnqueueArgs) -> SingletonCollisionError:
    """The collision ``backend.enqueue(item)`` raises."""
    with pytest.raises(SingletonCollisionError) as info:
        await backend.enqueue(item)
    return info.value


async def next_window(harness: Harness, key: str, width: timedelta) -> None:
    """Let one whole window of ``width`` pass. On Postgres time travel moves every stored
    timestamp back, the database clock stays; a windowed key carries its window's start in
    its text, so that start moves back with the rest (as ``unique_until`` does)."""
    await harness.travel(width.total_seconds())
    if harness.pg is None:
        return
    for row in await harness.sql(
        "SELECT id, unique_until FROM {schema}.jobs WHERE unique_key LIKE $1 || '@%'", key
    ):
        start = row["unique_until"] - width
        await harness.sql(
            "UPDATE {schema}.jobs SET unique_key = $2 WHERE id = $1",
            row["id"],
            windowed_key(key, start),
        )


# --- a key alone -------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING])
async def test_a_key_alone_is_refused_while_its_job_waits_or_runs(
    harness: Harness, status: JobStatus
) -> None:
    holder, _ = await job_in(harness, status, unique_key="report:7")
    assert (holder.unique_key, holder.unique_until) == ("report:7", None)

    error = await refused(harness.backend, args(unique_key="report:7", queue=new_queue()))

    assert (error.unique_key, error.existing_job_id) == ("report:7", holder.id)
    assert error.retry_after is None  # free when the holder ends: no time to name
    assert [row.id for row in await jobs_with(harness.backend, "report:7")] == [holder.id]


@pytest.mark.parametrize(
    "status",
    [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.CRASHED,
        JobStatus.ABANDONED,
    ],
)
async def test_a_key_alone_is_free_once_its_job_has_ended(
    harness: Harness, status: JobStatus
) -> None:
    ended, _ = await job_in(harness, status, unique_key="report:7")

    again = await harness.backend.enqueue(args(unique_key="report:7"))

    assert again.id != ended.id
    assert (again.unique_key, again.unique_until) == ("report:7", None)
    held = await harness.backend.enqueue(args(unique_key="report:8"))
    assert held.unique_key == "report:8"  # other keys never collide


async def test_different_keys_do_not_collide_and_jobs_without_a_key_never_do(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.enqueue(args(unique_key="a"))
    await backend.enqueue(args(unique_key="b"))
    await backend.enqueue(args())
    await backend.enqueue(args())
    assert len(await backend.list_jobs(JobFilter(limit=None))) == 4


# --- a key with a window -----------------------------------------------------------------------
async def test_a_windowed_key_is_held_in_its_window_even_after_success_then_freed(
    harness: Harness,
) -> None:
    backend = harness.backend
    done, _ = await job_in(harness, JobStatus.SUCCEEDED, unique_key="digest", unique_for=WINDOW)
    assert done.unique_until is not None

    before = await harness.now()
    error = await refused(backend, args(unique_key="digest", unique_for=WINDOW))
    after = await harness.now()

    assert (error.unique_key, error.existing_job_id) == ("digest", done.id)
    # The hint: when the holder's window ends, from the backend's now.
    assert isinstance(error.retry_after, timedelta)
    assert done.unique_until - after <= error.retry_after <= done.unique_until - before
    assert timedelta(0) < error.retry_after <= WINDOW

    await next_window(harness, "digest", WINDOW)
    fresh = await backend.enqueue(args(unique_key="digest", unique_for=WINDOW))

    assert fresh.id != done.id
    assert fresh.unique_key != (await reload(backend, done.id)).unique_key
    assert len(await jobs_with(backend, "digest@")) == 2


async def test_a_windowed_key_is_also_held_while_its_job_waits(harness: Harness) -> None:
    holder, _ = await job_in(harness, JobStatus.SCHEDULED, unique_key="d", unique_for=WINDOW)
    error = await refused(harness.backend, args(unique_key="d", unique_for=WINDOW))
    assert error.existing_job_id == holder.id
    assert error.retry_after is not None


@pytest.mark.parametrize(
    "width", [timedelta(minutes=90), timedelta(days=1), timedelta(microseconds=3)]
)
async def test_windows_are_aligned_on_the_unix_epoch_and_the_key_names_their_start(
    harness: Harness, width: timedelta
) -> None:
    # A few microseconds in, so a 3 us window starts off a whole second on the fake clock too
    # (the stored text then carries microseconds).
    await harness.travel(0.000004)
    before = await harness.now()
    job = await harness.backend.enqueue(args(unique_key="k", unique_for=width))
    after = await harness.now()

    assert job.unique_until is not None
    start = job.unique_until - width
    assert (start - _EPOCH) % width == timedelta(0)
    assert start <= job.created_at < job.unique_until
    assert before - width < start <= after
    # One text on every backend (Postgres builds it in SQL): the helper's.
    assert job.unique_key == windowed_key("k", start)


async def test_keys_with_and_without_a_window_do_not_collide(harness: Harness) -> None:
    backend = harness.backend
    plain = await backend.enqueue(args(unique_key="k"))
    windowed = await backend.enqueue(args(unique_key="k", unique_for=WINDOW))
    assert plain.unique_key == "k"
    assert windowed.unique_key is not None and windowed.unique_key.startswith("k@")


# --- batches -----------------------------------------------------------------------------------
async def _batch(backend: Backend, how: str, items: list[EnqueueArgs]) -> Any:
    if how == "enqueue_batch":
        return await backend.enqueue_batch(items)
    return await backend.enqueue_batch_fast(items)


@pytest.mark.parametrize("how", ["enqueue_batch", "enqueue_batch_fast"])
@pytest.mark.parametrize("unique_for", [None, WINDOW])
async def test_a_batch_holding_a_key_twice_inserts_nothing(
    harness: Harness, how: str, unique_for: timedelta | None
) -> None:
    first = args(unique_key="k", unique_for=unique_for, job_id=uuid7())
    items = [first, args(unique_key="other"), args(), args(unique_key="k", unique_for=unique_for)]

    with pytest.raises(SingletonCollisionError) as info:
        await _batch(harness.backend, how, items)

    assert (info.value.unique_key, info.value.existing_job_id) == ("k", first.job_id)
    assert await harness.backend.list_jobs(JobFilter(limit=None)) == []


@pytest.mark.parametrize("how", ["enqueue_batch", "enqueue_batch_fast"])
@pytest.mark.parametrize("unique_for", [None, WINDOW])
async def test_a_batch_colliding_with_a_stored_job_inserts_nothing(
    harness: Harness, how: str, unique_for: timedelta | None
) -> None:
    backend = harness.backend
    holder = await backend.enqueue(args(unique_key="k", unique_for=unique_for))
    items = [args(unique_key="fresh"), args(), args(unique_key="k", unique_for=unique_for)]

    with pytest.raises(SingletonCollisionError) as info:
        await _batch(backend, how, items)

    error = info.value
    assert (error.unique_key, error.existing_job_id) == ("k", holder.id)
    assert (error.retry_after is None) == (unique_for is None)
    assert [row.id for row in await backend.list_jobs(JobFilter(limit=None))] == [holder.id]


async def test_a_batch_returns_the_keys_its_rows_store(harness: Harness) -> None:
    rows = await harness.backend.enqueue_batch(
        [args(unique_key="a"), args(unique_key="b", unique_for=WINDOW), args()]
    )
    assert [row.unique_key for row in rows[::2]] == ["a", None]
    assert rows[1].unique_until is not None
    assert rows[1].unique_key == windowed_key("b", rows[1].unique_until - WINDOW)
    assert [await harness.backend.get(row.id) for row in rows] == rows


# --- the id still decides first ----------------------------------------------------------------
@pytest.mark.parametrize("unique_for", [None, WINDOW])
async def test_a_retried_enqueue_with_the_same_id_returns_the_stored_job(
    harness: Harness, unique_for: timedelta | None
) -> None:
    backend = harness.backend
    item = args(unique_key="k", unique_for=unique_for, job_id=uuid7())
    first = await backend.enqueue(item)

    again = await backend.enqueue(item)

    assert again == first
    assert [row.id for row in await backend.list_jobs(JobFilter(limit=None))] == [first.id]


async def test_a_caller_transaction_holds_its_keys_for_its_own_later_enqueues(
    harness: Harness,
) -> None:
    backend = harness.backend
    async with backend.transaction() as tx:
        holder = await backend.enqueue(args(unique_key="k"), connection=tx)
        with pytest.raises(SingletonCollisionError) as info:
            await backend.enqueue(args(unique_key="k"), connection=tx)
        assert info.value.existing_job_id == holder.id
    assert [row.id for row in await backend.list_jobs(JobFilter(limit=None))] == [holder.id]


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"unique_for": WINDOW}, "unique_for needs a unique_key"),
        ({"unique_key": "k", "unique_for": timedelta(0)}, "unique_for must be a positive"),
        ({"unique_key": "k", "unique_for": timedelta(seconds=-5)}, "unique_for must be a positive"),
        ({"unique_key": ""}, "unique_key must not be empty"),
        ({"unique_key": "x" * 1025}, "unique_key is longer than 1024 bytes"),
    ],
)
async def test_bad_unique_options_are_refused_and_insert_nothing(
    harness: Harness, fields: dict[str, Any], message: str
) -> None:
    backend = harness.backend
    with pytest.raises(ValueError, match=message):
        await backend.enqueue(args(**fields))
    with pytest.raises(ValueError, match=message):
        await backend.enqueue_batch([args(), args(**fields)])
    with pytest.raises(ValueError, match=message):
        await backend.enqueue_batch_fast([args(), args(**fields)])
    assert await backend.list_jobs(JobFilter(limit=None)) == []


# --- the archive -------------------------------------------------------------------------------
@pytest.mark.parametrize("unique_for", [None, WINDOW])
async def test_an_archived_job_keeps_its_key(
    harness: Harness, unique_for: timedelta | None
) -> None:
    backend = harness.backend
    done, _ = await job_in(harness, JobStatus.SUCCEEDED, unique_key="k", unique_for=unique_for)
    await harness.travel(120)
    policy = PrunePolicy(
        retention={JobStatus.SUCCEEDED: timedelta(seconds=60)}, archive_for=timedelta(days=1)
    )

    await backend.prune_jobs(policy)

    archived = await backend.get_archived_job(done.id)
    assert archived is not None
    assert archived.job.unique_key == done.unique_key
    if done.unique_until is None:
        assert archived.job.unique_until is None
    else:  # Postgres time travel moved it back with every stored time; memory's clock moved
        moved = timedelta(seconds=120) if harness.pg is not None else timedelta(0)
        assert archived.job.unique_until == done.unique_until - moved


# --- the client --------------------------------------------------------------------------------
async def test_the_client_passes_the_key_and_the_window_in_seconds(harness: Harness) -> None:
    async with JobsClient(backend=harness.backend) as client:
        job = await client.enqueue("work", {"n": 1}, unique_key="k", unique_for=3600)
        [batched] = await client.enqueue_batch(
            [EnqueueItem("work", {"n": 2}, unique_key="b", unique_for=timedelta(hours=1))]
        )
        with pytest.raises(SingletonCollisionError) as info:
            await client.enqueue("work", {"n": 3}, unique_key="k", unique_for=3600)
    assert info.value.existing_job_id == job.id
    for row, key in ((job, "k"), (batched, "b")):
        assert row.unique_until is not None
        assert row.unique_key == windowed_key(key, row.unique_until - timedelta(hours=1))


async def test_a_lost_answer_is_retried_into_the_same_job_not_a_collision(
    harness: Harness,
) -> None:
    # The retry reuses the job id, and the id is looked up before the key.
    flaky = Flaky(harness.backend, lose_answers=1)
    async with JobsClient(backend=cast(Backend, flaky)) as client:
        job = await client.enqueue("work", {"n": 1}, unique_key="k")
    assert [row.id for row in await harness.backend.list_jobs(JobFilter(limit=None))] == [job.id]
    assert {args.job_id for args in flaky.enqueued} == {job.id}
    assert len(flaky.enqueued) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": 60}, "unique_for needs a unique_key"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for must be a positive"),
        ({"unique_key": ""}, "unique_key must not be empty"),
    ],
)
async def test_the_client_refuses_bad_unique_options_as_config_errors(
    harness: Harness, options: dict[str, Any], message: str
) -> None:
    async with JobsClient(backend=harness.backend) as client:
        with pytest.raises(ConfigError, match=message):
            await client.enqueue("work", {"n": 1}, **options)
    with pytest.raises(ConfigError, match=message):
        EnqueueItem("work", {}, **options)
    assert await harness.backend.list_jobs(JobFilter(limit=None)) == []


# --- operator retry ----------------------------------------------------------------------------
async def test_an_operator_retry_leaves_a_job_whose_key_another_job_holds(
    harness: Harness,
) -> None:
    backend = harness.backend
    failed, _ = await job_in(harness, JobStatus.FAILED, unique_key="k")
    holder = await backend.enqueue(args(unique_key="k"))

    assert await backend.retry_job(failed.id) is False
    assert await backend.retry_where(JobFilter(status="failed", limit=None)) == 0

    assert (await reload(backend, failed.id)).status is JobStatus.FAILED
    assert await backend.write_cancel_request(holder.id, "done") == "cancelled"
    assert await backend.retry_job(failed.id) is True  # the key is free: it takes it back
    error = await refused(backend, args(unique_key="k"))
    assert error.existing_job_id == failed.id


async def test_a_bulk_retry_re_pends_only_the_newest_job_of_a_key(harness: Harness) -> None:
    backend = harness.backend
    older, _ = await job_in(harness, JobStatus.FAILED, unique_key="k")
    await harness.travel(1)
    newer, _ = await job_in(harness, JobStatus.FAILED, unique_key="k")
    plain, _ = await job_in(harness, JobStatus.FAILED)

    assert await backend.retry_where(JobFilter(status="failed", limit=None)) == 2

    statuses = {job.id: (await reload(backend, job.id)).status for job in (older, newer, plain)}
    assert statuses == {
        older.id: JobStatus.FAILED,
        newer.id: JobStatus.PENDING,
        plain.id: JobStatus.PENDING,
    }


async def test_a_job_with_a_windowed_key_is_retried_holding_it(harness: Harness) -> None:
    backend = harness.backend
    failed, _ = await job_in(harness, JobStatus.FAILED, unique_key="w", unique_for=WINDOW)
    assert await backend.retry_job(failed.id) is True
    again = await reload(backend, failed.id)
    assert (again.status, again.unique_key) == (JobStatus.PENDING, failed.unique_key)
