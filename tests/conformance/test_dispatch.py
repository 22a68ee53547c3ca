"""Dispatch: claiming, ordering in both queue modes, caps, identity serialization, pause.

What a caller observes on either backend. How many rows Postgres reads to decide (its bounded
windows, the cohort budget) is tests/postgres/test_dispatch_windows.py's.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import (
    BOOM,
    LEASE,
    args,
    between,
    cap_actor,
    reload,
    running_job,
    wait_set,
)


async def dispatch(backend: Backend, queue: str | list[str], limit: int = 100) -> list[JobRow]:
    queues = [queue] if isinstance(queue, str) else queue
    return await backend.dispatch_batch(uuid4(), queues, limit, LEASE)


def payloads(rows: list[JobRow], key: str = "n") -> list[object]:
    return [row.payload[key] for row in rows]


async def test_dispatch_claims_a_pending_job_for_the_worker(harness: Harness) -> None:
    job = await harness.backend.enqueue(args(queue="q"))
    worker = uuid4()
    before = await harness.now()
    [claimed] = await harness.backend.dispatch_batch(worker, ["q"], 10, timedelta(seconds=45))
    after = await harness.now()
    assert claimed.id == job.id
    assert claimed.status is JobStatus.RUNNING
    assert claimed.attempt == 1
    assert claimed.locked_by_worker == worker
    assert between(claimed.claimed_at, before, after)
    assert claimed.started_at is None and claimed.is_claimed  # the worker records the start
    assert between(
        claimed.lock_expires_at, before + timedelta(seconds=45), after + timedelta(seconds=45)
    )
    assert await reload(harness.backend, job.id) == claimed


async def test_dispatch_records_a_pending_to_running_event(harness: Harness) -> None:
    job = await harness.backend.enqueue(args(queue="q"))
    worker = uuid4()
    await harness.backend.dispatch_batch(worker, ["q"], 1, LEASE)
    [event] = await harness.backend.get_events(job.id)
    assert (event.kind, event.from_status, event.to_status) == (
        "state_change",
        JobStatus.PENDING,
        JobStatus.RUNNING,
    )
    assert event.worker_id == worker


async def test_a_claimed_job_is_never_handed_out_again(harness: Harness) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(5)])
    first = await dispatch(harness.backend, "q", 3)
    second = await dispatch(harness.backend, "q", 10)
    third = await dispatch(harness.backend, "q", 10)
    assert len(first) == 3 and len(second) == 2 and third == []
    assert not {row.id for row in first} & {row.id for row in second}


async def test_dispatch_honours_the_limit_and_an_empty_request(harness: Harness) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(5)])
    assert len(await dispatch(harness.backend, "q", 2)) == 2
    assert await dispatch(harness.backend, "q", 0) == []
    assert await dispatch(harness.backend, [], 10) == []
    assert await dispatch(harness.backend, "empty", 10) == []


async def test_dispatch_only_takes_jobs_of_the_requested_queues(harness: Harness) -> None:
    await harness.backend.enqueue_batch(
        [args(queue="a", payload={"n": "a"}), args(queue="b", payload={"n": "b"})]
    )
    assert payloads(await dispatch(harness.backend, "b")) == ["b"]
    assert payloads(await dispatch(harness.backend, ["a", "b"])) == ["a"]


async def test_scheduled_jobs_wait_for_the_scheduled_sweep(harness: Harness) -> None:
    job = await harness.backend.enqueue(args(queue="q", delay=timedelta(seconds=10)))
    assert await dispatch(harness.backend, "q") == []
    await harness.travel(11)
    assert await dispatch(harness.backend, "q") == []  # due, but still scheduled
    assert await harness.backend.promote_scheduled_jobs() == 1
    assert [row.id for row in await dispatch(harness.backend, "q")] == [job.id]


async def test_strict_fifo_takes_higher_priority_first_then_oldest_first(
    harness: Harness,
) -> None:
    for n, priority in enumerate([0, 5, 0, 10, 5, 0]):
        await harness.backend.enqueue(args(queue="q", priority=priority, payload={"n": n}))
    claimed = await dispatch(harness.backend, "q", 10)
    assert payloads(claimed) == [3, 1, 4, 0, 2, 5]


async def test_strict_fifo_order_holds_one_job_at_a_time(harness: Harness) -> None:
    for n, priority in enumerate([1, 0, 1, 2]):
        await harness.backend.enqueue(args(queue="q", priority=priority, payload={"n": n}))
    order = []
    for _ in range(4):
        [row] = await dispatch(harness.backend, "q", 1)
        order.append(row.payload["n"])
    assert order == [3, 0, 2, 1]


async def test_strict_fifo_orders_across_actors_and_queues_by_priority_then_age(
    harness: Harness,
) -> None:
    await harness.backend.enqueue(args(actor="a", queue="x", payload={"n": 1}))
    await harness.backend.enqueue(args(actor="b", queue="y", payload={"n": 2}, priority=1))
    await harness.backend.enqueue(args(actor="c", queue="x", payload={"n": 3}))
    assert payloads(await dispatch(harness.backend, ["x", "y"])) == [2, 1, 3]


async def test_strict_fifo_orders_jobs_with_and_without_a_fairness_key_together(
    harness: Harness,
) -> None:
    keys = [None, "k", None, "k", "j", None]
    for n, (key, priority) in enumerate(zip(keys, [0, 0, 5, 5, 0, 0], strict=True)):
        await harness.backend.enqueue(
            args(queue="q", priority=priority, fairness_key=key, payload={"n": n})
        )
    order = []
    for _ in range(3):
        [row] = await dispatch(harness.backend, "q", 1)
        order.append(row.payload["n"])
    assert order + payloads(await dispatch(harness.backend, "q")) == [2, 3, 0, 1, 4, 5]


async def test_round_robin_interleaves_fairness_keys(harness: Harness) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    for n in range(4):
        await harness.backend.enqueue(args(queue="q", fairness_key="a", payload={"n": f"a{n}"}))
    for n in range(4):
        await harness.backend.enqueue(args(queue="q", fairness_key="b", payload={"n": f"b{n}"}))
    claimed = await dispatch(harness.backend, "q", 4)
    assert payloads(claimed) == ["a0", "b0", "a1", "b1"]


async def test_round_robin_does_not_let_a_deep_backlog_starve_a_small_tenant(
    harness: Harness,
) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    await harness.backend.enqueue_batch(
        [args(queue="q", fairness_key="big", payload={"n": f"big{n}"}) for n in range(60)]
    )
    await harness.backend.enqueue_batch(
        [args(queue="q", fairness_key="small", payload={"n": f"small{n}"}) for n in range(2)]
    )
    claimed = await dispatch(harness.backend, "q", 3)
    assert payloads(claimed) == ["big0", "small0", "big1"]


async def test_round_robin_ranks_by_priority_inside_each_cohort(harness: Harness) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    await harness.backend.enqueue(args(queue="q", fairness_key="a", payload={"n": "a-low"}))
    await harness.backend.enqueue(
        args(queue="q", fairness_key="a", priority=9, payload={"n": "a-high"})
    )
    await harness.backend.enqueue(args(queue="q", fairness_key="b", payload={"n": "b"}))
    assert payloads(await dispatch(harness.backend, "q")) == ["a-high", "b", "a-low"]


async def test_round_robin_treats_jobs_without_a_key_as_one_cohort(harness: Harness) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    for n in range(3):
        await harness.backend.enqueue(args(queue="q", payload={"n": f"none{n}"}))
    await harness.backend.enqueue(args(queue="q", fairness_key="k", payload={"n": "k0"}))
    assert payloads(await dispatch(harness.backend, "q")) == ["none0", "k0", "none1", "none2"]


async def test_round_robin_cohorts_span_actors(harness: Harness) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    await harness.backend.enqueue(args(actor="x", queue="q", fairness_key="t1", payload={"n": 1}))
    await harness.backend.enqueue(args(actor="y", queue="q", fairness_key="t1", payload={"n": 2}))
    await harness.backend.enqueue(args(actor="x", queue="q", fairness_key="t2", payload={"n": 3}))
    assert payloads(await dispatch(harness.backend, "q")) == [1, 3, 2]


async def test_queues_of_different_modes_are_served_in_the_order_given(
    harness: Harness,
) -> None:
    await harness.backend.update_queue("fair", mode="round_robin")
    await harness.backend.enqueue(args(queue="plain", payload={"n": "plain"}))
    await harness.backend.enqueue(args(queue="fair", payload={"n": "fair"}, priority=5))
    assert payloads(await dispatch(harness.backend, ["plain", "fair"])) == ["plain", "fair"]
    await harness.backend.enqueue(args(queue="plain", payload={"n": "plain2"}, priority=5))
    await harness.backend.enqueue(args(queue="fair", payload={"n": "fair2"}))
    assert payloads(await dispatch(harness.backend, ["fair", "plain"])) == ["fair2", "plain2"]


async def test_an_actors_max_concurrent_caps_its_running_jobs(harness: Harness) -> None:
    await cap_actor(harness.backend, "capped", 2)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(5)])
    await harness.backend.enqueue_batch([args(actor="free", queue="q") for _ in range(3)])
    worker = uuid4()
    claimed = await harness.backend.dispatch_batch(worker, ["q"], 10, LEASE)
    assert sorted(row.actor for row in claimed) == ["capped"] * 2 + ["free"] * 3
    assert await dispatch(harness.backend, "q") == []
    first_capped = next(row for row in claimed if row.actor == "capped")
    assert await harness.backend.mark_succeeded(first_capped.lease(), None)
    assert [row.actor for row in await dispatch(harness.backend, "q")] == ["capped"]


async def test_an_actors_cap_counts_its_running_jobs_in_every_queue(harness: Harness) -> None:
    await cap_actor(harness.backend, "capped", 2)
    await harness.backend.enqueue_batch([args(actor="capped", queue="a") for _ in range(2)])
    await harness.backend.enqueue_batch([args(actor="capped", queue="b") for _ in range(2)])
    assert len(await dispatch(harness.backend, "a")) == 2
    assert await dispatch(harness.backend, "b") == []


async def test_max_concurrent_is_read_on_every_dispatch(harness: Harness) -> None:
    await cap_actor(harness.backend, "capped", 0)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(4)])
    assert await dispatch(harness.backend, "q") == []
    await harness.backend.update_actor_config("capped", max_concurrent=1)
    assert len(await dispatch(harness.backend, "q")) == 1
    await harness.backend.update_actor_config("capped", max_concurrent=None)
    assert len(await dispatch(harness.backend, "q")) == 3


async def test_a_queues_max_concurrent_caps_its_running_jobs(harness: Harness) -> None:
    await harness.backend.update_queue("q", max_concurrent=3)
    await harness.backend.enqueue_batch([args(actor=f"a{n % 2}", queue="q") for n in range(6)])
    await harness.backend.enqueue_batch([args(queue="other") for _ in range(2)])
    claimed = await dispatch(harness.backend, ["q", "other"])
    assert sorted(row.queue for row in claimed) == ["other"] * 2 + ["q"] * 3
    assert await dispatch(harness.backend, "q") == []
    await harness.backend.update_queue("q", max_concurrent=None)
    assert len(await dispatch(harness.backend, "q")) == 3


async def test_a_queue_cap_and_an_actor_cap_apply_together(harness: Harness) -> None:
    await harness.backend.update_queue("q", max_concurrent=3)
    await cap_actor(harness.backend, "capped", 1)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(3)])
    await harness.backend.enqueue_batch([args(actor="free", queue="q") for _ in range(3)])
    claimed = await dispatch(harness.backend, "q")
    assert sorted(row.actor for row in claimed) == ["capped", "free", "free"]


async def test_a_paused_queue_dispatches_nothing_until_resumed(harness: Harness) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(2)])
    await harness.backend.enqueue(args(queue="live"))
    await harness.backend.update_queue("q", paused=True)
    assert [row.queue for row in await dispatch(harness.backend, ["q", "live"])] == ["live"]
    assert await dispatch(harness.backend, "q") == []
    await harness.backend.update_queue("q", paused=False)
    assert len(await dispatch(harness.backend, "q")) == 2


async def test_only_one_job_per_identity_key_runs_at_a_time(harness: Harness) -> None:
    await harness.backend.enqueue_batch(
        [args(queue="q", identity_key="user-1", payload={"n": n}) for n in range(3)]
        + [args(queue="q", identity_key="user-2", payload={"n": 9})]
    )
    worker = uuid4()
    claimed = await harness.backend.dispatch_batch(worker, ["q"], 10, LEASE)
    assert payloads(claimed) == [0, 9]
    assert await dispatch(harness.backend, "q") == []
    assert await harness.backend.mark_succeeded(claimed[0].lease(), None)
    assert payloads(await dispatch(harness.backend, "q")) == [1]


async def test_identity_keys_serialize_per_actor(harness: Harness) -> None:
    await harness.backend.enqueue(args(actor="a", queue="q", identity_key="k"))
    await harness.backend.enqueue(args(actor="b", queue="q", identity_key="k"))
    assert sorted(row.actor for row in await dispatch(harness.backend, "q")) == ["a", "b"]


async def test_jobs_without_an_identity_key_are_not_serialized(harness: Harness) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(3)])
    assert len(await dispatch(harness.backend, "q")) == 3


async def test_releasing_unstarted_leases_gives_the_claim_back_without_using_the_budget(
    harness: Harness,
) -> None:
    await harness.backend.enqueue_batch([args(queue="q") for _ in range(3)])
    worker = uuid4()
    claimed = await harness.backend.dispatch_batch(worker, ["q"], 3, LEASE)
    released = await harness.backend.release_leases(
        worker, [row.lease() for row in claimed[:2]], reason="shutdown"
    )
    assert released == 2
    row = await reload(harness.backend, claimed[0].id)
    assert row.status is JobStatus.PENDING
    assert (row.attempt, row.attempts_used) == (1, 0)
    assert row.locked_by_worker is None and row.lock_expires_at is None and row.started_at is None
    assert row.scheduled_at == claimed[0].scheduled_at  # back in its place
    assert await harness.backend.get_attempts(row.id) == []
    events = await harness.backend.get_events(row.id)
    assert (events[-1].from_status, events[-1].to_status) == (JobStatus.RUNNING, JobStatus.PENDING)
    assert events[-1].detail == {"reason": "shutdown", "started": False}
    again = await dispatch(harness.backend, "q")
    assert {r.id for r in again} == {r.id for r in claimed[:2]}
    # A new claim, a new number (the lease changes with it); the budget is still whole.
    assert {(r.attempt, r.attempts_used) for r in again} == {(2, 1)}


async def test_releasing_leases_ignores_jobs_of_other_workers(harness: Harness) -> None:
    await harness.backend.enqueue(args(queue="q"))
    [claimed] = await dispatch(harness.backend, "q")
    stranger = uuid4()
    assert await harness.backend.release_leases(stranger, [claimed.lease()], reason="x") == 0
    assert await harness.backend.release_leases(stranger, [], reason="x") == 0
    assert await reload(harness.backend, claimed.id) == claimed


async def test_a_released_job_wakes_the_subscribers(harness: Harness) -> None:
    await harness.backend.enqueue(args(queue="q"))
    worker = uuid4()
    [claimed] = await harness.backend.dispatch_batch(worker, ["q"], 1, LEASE)
    async with harness.backend.subscribe_wake() as woken:
        assert (
            await harness.backend.release_leases(worker, [claimed.lease()], reason="shutdown") == 1
        )
        await wait_set(woken)


async def test_a_redispatch_after_a_retry_sets_claimed_at_again_and_clears_started_at(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, worker = await running_job(backend)
    assert job.started_at is not None
    await backend.mark_failed_or_retry(job.lease(), BOOM, timedelta(seconds=5))
    await harness.travel(6)
    assert await backend.promote_scheduled_jobs() == 1
    before = await harness.now()
    [again] = await backend.dispatch_batch(worker, [job.queue], 1, LEASE)
    after = await harness.now()
    assert (again.attempt, again.started_at) == (2, None)
    assert between(again.claimed_at, before, after)
    assert await reload(backend, job.id) == again


async def test_a_claimed_job_counts_against_the_caps_before_it_starts(harness: Harness) -> None:
    await cap_actor(harness.backend, "capped", 1)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(2)])
    [claimed] = await dispatch(harness.backend, "q")
    assert claimed.is_claimed
    assert await dispatch(harness.backend, "q") == []


async def test_a_capped_actors_backlog_does_not_block_the_head_of_the_queue(
    harness: Harness,
) -> None:
    await cap_actor(harness.backend, "capped", 1)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(50)])
    await harness.backend.enqueue_batch([args(actor="free", queue="q") for _ in range(3)])
    claimed = await dispatch(harness.backend, "q", 4)
    assert sorted(row.actor for row in claimed) == ["capped", "free", "free", "free"]


async def test_a_saturated_actor_is_skipped_until_one_of_its_jobs_ends(harness: Harness) -> None:
    await cap_actor(harness.backend, "capped", 1)
    await harness.backend.enqueue_batch([args(actor="capped", queue="q") for _ in range(5)])
    worker = uuid4()
    [first] = await harness.backend.dispatch_batch(worker, ["q"], 5, LEASE)
    await harness.backend.enqueue(args(actor="free", queue="q"))
    assert [row.actor for row in await dispatch(harness.backend, "q", 5)] == ["free"]
    assert await harness.backend.mark_succeeded(first.lease(), None)
    assert [row.actor for row in await dispatch(harness.backend, "q", 5)] == ["capped"]


async def test_round_robin_puts_a_literal_null_key_in_the_cohort_of_unkeyed_jobs(
    harness: Harness,
) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    await harness.backend.enqueue_batch(
        [
            args(queue="q", payload={"n": "none0"}),
            args(queue="q", payload={"n": "none1"}),
            args(queue="q", fairness_key="__null__", payload={"n": "literal"}),
            args(queue="q", fairness_key="k", payload={"n": "k"}),
        ]
    )
    assert payloads(await dispatch(harness.backend, "q")) == ["none0", "k", "none1", "literal"]


async def test_round_robin_alternates_cohorts_one_job_at_a_time(harness: Harness) -> None:
    await harness.backend.update_queue("q", mode="round_robin")
    await harness.backend.enqueue_batch(
        [args(queue="q", fairness_key="big", payload={"n": "big"}) for _ in range(6)]
        + [args(queue="q", fairness_key="small", payload={"n": "small"}) for _ in range(2)]
    )
    worker, order = uuid4(), []
    for _ in range(6):
        [row] = await harness.backend.dispatch_batch(worker, ["q"], 1, LEASE)
        order.append(row.payload["n"])
        assert await harness.backend.mark_succeeded(row.lease(), None)
        await harness.travel(1)
    assert order == ["big", "small", "big", "small", "big", "big"]


async def test_round_robin_with_many_cohorts_claims_every_job_once_over_later_calls(
    harness: Harness,
) -> None:
    # A call may claim fewer than its limit while more are due; later calls claim the rest.
    backend = harness.backend
    await backend.update_queue("q", mode="round_robin")
    jobs = await backend.enqueue_batch(
        [args(queue="q", fairness_key="deep", payload={"n": f"deep{n}"}) for n in range(40)]
        + [args(queue="q", fairness_key=f"t{n:03}", payload={"n": f"t{n}"}) for n in range(200)]
    )
    claimed: list[JobRow] = []
    while len(claimed) < len(jobs):
        batch = await dispatch(backend, "q", 50)
        assert batch, "due jobs remain but a call claimed none"
        claimed.extend(batch)
    assert sorted(row.id for row in claimed) == sorted(job.id for job in jobs)
    assert await dispatch(backend, "q", 50) == []
