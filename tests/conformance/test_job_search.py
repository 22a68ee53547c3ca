"""Searching jobs a page at a time: several queues or actors at once, created-at and
finished-at bounds (moments or ages on the backend's clock), one batch's children, a total,
and a cursor that walks every match once."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core.backend.protocol.admin import JobQuery
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, args, job_in, new_queue, running_job


async def three_ages(harness: Harness, queue: str) -> tuple[UUID, UUID, UUID]:
    """Jobs created 300 s, 200 s and 100 s ago (oldest first), actors a, b, c."""
    made = []
    for actor in ("a", "b", "c"):
        made.append((await harness.backend.enqueue(args(actor, queue=queue))).id)
        await harness.travel(100)
    return made[0], made[1], made[2]


async def test_repeated_queues_and_actors_combine(harness: Harness) -> None:
    backend = harness.backend
    first, second = new_queue(), new_queue()
    one = await backend.enqueue(args("a", queue=first))
    two = await backend.enqueue(args("b", queue=second))
    await backend.enqueue(args("a", queue=new_queue()))
    page = await backend.search_jobs(JobQuery(queues=(first, second)))
    assert {j.id for j in page.jobs} == {one.id, two.id}
    assert (page.total, page.total_exact, page.next_after) == (2, True, None)
    page = await backend.search_jobs(JobQuery(queues=(first, second), actors=("b", "z")))
    assert [j.id for j in page.jobs] == [two.id]
    assert (await backend.search_jobs(JobQuery(queues=()))).total == 0
    done = await backend.search_jobs(
        JobQuery(queues=(first, second), statuses=(JobStatus.SUCCEEDED,))
    )
    assert done.jobs == [] and done.total == 0


async def test_ages_bound_created_at_on_the_backend_clock(harness: Harness) -> None:
    queue = new_queue()
    oldest, middle, newest = await three_ages(harness, queue)
    search = harness.backend.search_jobs
    recent = await search(JobQuery(queues=(queue,), created_since=timedelta(seconds=250)))
    assert [j.id for j in recent.jobs] == [newest, middle]
    older = await search(JobQuery(queues=(queue,), created_until=timedelta(seconds=150)))
    assert [j.id for j in older.jobs] == [middle, oldest]
    window = await search(
        JobQuery(
            queues=(queue,),
            created_since=timedelta(seconds=250),
            created_until=timedelta(seconds=150),
        )
    )
    assert [j.id for j in window.jobs] == [middle]


async def test_moments_bound_created_at_since_inclusive_until_exclusive(harness: Harness) -> None:
    queue = new_queue()
    oldest, middle, newest = await three_ages(harness, queue)
    created = (await harness.backend.get(middle)).created_at  # type: ignore[union-attr]
    search = harness.backend.search_jobs
    since = await search(JobQuery(queues=(queue,), created_since=created))
    assert [j.id for j in since.jobs] == [newest, middle]
    until = await search(JobQuery(queues=(queue,), created_until=created))
    assert [j.id for j in until.jobs] == [oldest]


async def test_the_cursor_walks_every_match_once_newest_first(harness: Harness) -> None:
    queue = new_queue()
    made = [(await harness.backend.enqueue(args(queue=queue))).id for _ in range(7)]
    made += [j.id for j in await harness.backend.enqueue_batch([args(queue=queue)] * 3)]
    listed = []
    after = None
    pages = 0
    while True:
        page = await harness.backend.search_jobs(JobQuery(queues=(queue,), limit=3, after=after))
        assert (page.total, page.total_exact) == (10, True)
        listed += [j.id for j in page.jobs]
        pages += 1
        if page.next_after is None:
            break
        after = page.next_after
    assert pages == 4
    assert sorted(listed) == sorted(made) and len(set(listed)) == 10
    rows = [await harness.backend.get(i) for i in listed]
    keys = [(r.created_at, r.id) for r in rows if r is not None]
    assert keys == sorted(keys, reverse=True)


async def test_an_exact_last_page_has_no_next_and_the_total_stops_at_count_max(
    harness: Harness,
) -> None:
    queue = new_queue()
    await harness.backend.enqueue_batch([args(queue=queue)] * 4)
    page = await harness.backend.search_jobs(JobQuery(queues=(queue,), limit=4, count_max=2))
    assert len(page.jobs) == 4 and page.next_after is None
    assert (page.total, page.total_exact) == (2, False)


async def finish_three(harness: Harness, queue: str) -> tuple[UUID, UUID, UUID]:
    """Jobs that finished 300 s, 200 s and 100 s ago (oldest first), all created first."""
    backend = harness.backend
    running = [(await running_job(backend, queue=queue))[0] for _ in range(3)]
    for index, job in enumerate(running):
        if index == 1:
            assert await backend.mark_failed_or_retry(job.lease(), BOOM, None) is not None
        else:
            assert await backend.mark_succeeded(job.lease(), None)
        await harness.travel(100)
    return running[0].id, running[1].id, running[2].id


async def test_finished_bounds_keep_jobs_that_ended_within_them(harness: Harness) -> None:
    queue = new_queue()
    first, second, third = await finish_three(harness, queue)
    waiting = await harness.backend.enqueue(args(queue=queue))
    search = harness.backend.search_jobs
    everything = await search(JobQuery(queues=(queue,)))
    assert waiting.id in {j.id for j in everything.jobs} and everything.total == 4
    recent = await search(JobQuery(queues=(queue,), finished_since=timedelta(seconds=250)))
    assert {j.id for j in recent.jobs} == {second, third} and recent.total == 2
    older = await search(JobQuery(queues=(queue,), finished_until=timedelta(seconds=150)))
    assert {j.id for j in older.jobs} == {first, second}
    ended = (await harness.backend.get(second)).finished_at  # type: ignore[union-attr]
    assert ended is not None
    window = await search(JobQuery(queues=(queue,), finished_since=ended, finished_until=ended))
    assert window.jobs == [] and window.total == 0
    exact = await search(
        JobQuery(queues=(queue,), finished_since=ended, statuses=(JobStatus.FAILED,))
    )
    assert [j.id for j in exact.jobs] == [second]


async def test_a_batch_filter_keeps_that_batch_s_children(harness: Harness) -> None:
    backend = harness.backend
    queue = new_queue()
    batch, other = uuid4(), uuid4()
    children = [
        (await backend.enqueue(args(queue=queue, metadata={"batch_id": str(batch)}))).id
        for _ in range(3)
    ]
    await backend.enqueue(args(queue=queue, metadata={"batch_id": str(other)}))
    await backend.enqueue(args(queue=queue))
    page = await backend.search_jobs(JobQuery(batch_id=batch, limit=2))
    assert page.total == 3 and page.next_after is not None
    rest = await backend.search_jobs(JobQuery(batch_id=batch, limit=2, after=page.next_after))
    assert sorted(j.id for j in page.jobs + rest.jobs) == sorted(children)
    assert (await backend.search_jobs(JobQuery(batch_id=uuid4()))).total == 0


async def test_a_queue_filter_finds_its_jobs_in_every_status(harness: Harness) -> None:
    made = [(await job_in(harness, status))[0] for status in JobStatus]  # a queue each
    await harness.backend.enqueue(args(queue=new_queue()))
    queues = tuple(job.queue for job in made)
    page = await harness.backend.search_jobs(JobQuery(queues=queues))
    assert {j.id for j in page.jobs} == {job.id for job in made}
    assert page.total == len(JobStatus)
    for job in made:
        alone = await harness.backend.search_jobs(JobQuery(queues=(job.queue,)))
        assert [j.id for j in alone.jobs] == [job.id], job.status
