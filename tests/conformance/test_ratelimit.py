"""Reservation slots and the rate-limit denial write, on both backends: slots are held with a
lease, fenced by worker, renewed, released and swept; a job a limit holds back goes back to
``scheduled`` with its attempt given back, no attempt row, and the limit named in its event."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import Denied, LimitDefinition
from taskq_core.constants import DENIAL_GRID
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import LEASE, between, job_in, reload, running_job

SLOT_LEASE = timedelta(seconds=30)


async def test_a_reservation_admits_as_many_jobs_as_it_has_slots(harness: Harness) -> None:
    backend, worker = harness.backend, uuid4()
    jobs = [uuid4() for _ in range(3)]
    taken = [await backend.acquire_reservation("gpu", 2, job, worker, SLOT_LEASE) for job in jobs]
    assert taken == [True, True, False]
    held = await backend.list_held_reservation_slots("gpu")
    assert [(h.slot, h.job_id, h.worker_id) for h in held] == [
        (0, jobs[0], worker),
        (1, jobs[1], worker),
    ]


async def test_a_released_slot_is_free_again_and_only_its_worker_frees_it(
    harness: Harness,
) -> None:
    backend, worker = harness.backend, uuid4()
    first, second = uuid4(), uuid4()
    assert await backend.acquire_reservation("db", 1, first, worker, SLOT_LEASE)
    assert await backend.release_reservations(first, uuid4()) == 0  # another worker's attempt
    assert not await backend.acquire_reservation("db", 1, second, worker, SLOT_LEASE)
    assert await backend.release_reservations(first, worker) == 1
    assert await backend.release_reservations(first, worker) == 0
    assert await backend.acquire_reservation("db", 1, second, worker, SLOT_LEASE)


async def test_release_frees_only_the_named_reservations(harness: Harness) -> None:
    backend, worker, job = harness.backend, uuid4(), uuid4()
    assert await backend.acquire_reservation("a", 1, job, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("b", 1, job, worker, SLOT_LEASE)
    assert await backend.release_reservations(job, worker, ["a"]) == 1
    assert [h.name for h in await backend.list_held_reservation_slots()] == ["b"]


async def test_a_job_acquiring_again_takes_over_the_slot_it_holds(harness: Harness) -> None:
    backend, job = harness.backend, uuid4()
    assert await backend.acquire_reservation("one", 1, job, uuid4(), SLOT_LEASE)
    later_worker = uuid4()  # the job was reclaimed and runs again elsewhere
    assert await backend.acquire_reservation("one", 1, job, later_worker, SLOT_LEASE)
    [held] = await backend.list_held_reservation_slots("one")
    assert (held.job_id, held.worker_id) == (job, later_worker)


async def test_a_slot_whose_lease_ran_out_is_free_unless_renewed(harness: Harness) -> None:
    backend, worker = harness.backend, uuid4()
    renewed_job, lapsed_job = uuid4(), uuid4()
    assert await backend.acquire_reservation("r", 1, renewed_job, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("l", 1, lapsed_job, worker, SLOT_LEASE)
    await harness.travel(20)
    assert await backend.extend_reservation_leases(worker, [renewed_job], SLOT_LEASE) == 1
    await harness.travel(20)  # 40 s after the acquire: only the renewed lease still runs
    assert [h.name for h in await backend.list_held_reservation_slots()] == ["r"]
    assert not await backend.acquire_reservation("r", 1, uuid4(), worker, SLOT_LEASE)
    assert await backend.acquire_reservation("l", 1, uuid4(), worker, SLOT_LEASE)


async def test_extend_renews_only_this_workers_slots_of_the_named_jobs(harness: Harness) -> None:
    backend, worker = harness.backend, uuid4()
    mine, other = uuid4(), uuid4()
    assert await backend.acquire_reservation("x", 2, mine, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("x", 2, other, uuid4(), SLOT_LEASE)
    assert await backend.extend_reservation_leases(worker, [mine, other], SLOT_LEASE) == 1
    assert await backend.extend_reservation_leases(worker, [], SLOT_LEASE) == 0


async def test_sweep_frees_lapsed_slots_and_those_of_ended_jobs(harness: Harness) -> None:
    backend = harness.backend
    running, worker = await running_job(backend)
    done, _ = await job_in(harness, JobStatus.SUCCEEDED)
    waiting, _ = await job_in(harness, JobStatus.PENDING)
    lapsing = await running_job(backend)
    assert await backend.acquire_reservation("s", 9, running.id, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("s", 9, done.id, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("s", 9, waiting.id, worker, SLOT_LEASE)
    assert await backend.acquire_reservation("s", 9, uuid4(), worker, SLOT_LEASE)  # no job
    assert await backend.acquire_reservation(
        "s", 9, lapsing[0].id, lapsing[1], timedelta(seconds=5)
    )
    assert await backend.sweep_leaked_reservation_slots() == 2  # the ended and the unknown job
    await harness.travel(10)
    assert await backend.sweep_leaked_reservation_slots() == 1  # the lapsed lease
    held = {h.job_id for h in await backend.list_held_reservation_slots("s")}
    assert held == {running.id, waiting.id}
    assert await backend.sweep_leaked_reservation_slots() == 0


async def test_a_job_held_back_by_a_limit_goes_back_scheduled_without_an_attempt(
    harness: Harness,
) -> None:
    backend = harness.backend
    job, _ = await running_job(backend, started=False, max_attempts=1)
    before = await harness.now()
    outcome = await backend.mark_retry_after(
        job.lease(), timedelta(seconds=3), consume_budget=False, reason="rate_limit:api"
    )
    after = await harness.now()
    assert outcome == "scheduled"
    row = await reload(backend, job.id)
    assert (row.status, row.attempts_used, row.started_at) == (JobStatus.SCHEDULED, 0, None)
    # Due again on the grid: the next multiple of DENIAL_GRID from its own time.
    wait = timedelta(seconds=3)
    assert between(row.scheduled_at, before + wait, after + wait + DENIAL_GRID)
    assert round(row.scheduled_at.timestamp() / DENIAL_GRID.total_seconds(), 4) % 1 == 0
    assert await backend.get_attempts(job.id) == []  # the body never began
    last = (await backend.get_events(job.id))[-1]
    assert (last.from_status, last.to_status) == (JobStatus.RUNNING, JobStatus.SCHEDULED)
    assert last.detail == {"reason": "rate_limit:api"}
    # It runs again later under a new number, its one counted attempt still unused.
    await harness.travel(4)  # past the grid's step too
    assert await backend.promote_scheduled_jobs() >= 1
    claimed = await backend.dispatch_batch(uuid4(), [job.queue], 1, LEASE)
    assert [(c.id, c.attempt, c.attempts_used) for c in claimed] == [(job.id, 2, 1)]


async def test_a_retry_after_of_a_body_that_ran_keeps_its_attempt_row(harness: Harness) -> None:
    job, _ = await running_job(harness.backend, started=False)
    await harness.backend.mark_retry_after(
        job.lease(), timedelta(seconds=1), consume_budget=False, ran_for=0.5
    )
    [attempt] = await harness.backend.get_attempts(job.id)
    assert attempt.outcome == "retry_after"
    assert (await harness.backend.get_events(job.id))[-1].detail == {}


async def test_usage_reads_each_registered_limit_and_its_instances(harness: Harness) -> None:
    backend = harness.backend
    window = timedelta(minutes=1)
    await backend.register_rate_limits(
        [
            LimitDefinition("api", "token_bucket", 10.0, per_second=1.0),
            LimitDefinition("sms", "sliding_window", 3.0, span=window, keyed=True),
            LimitDefinition("gpu", "reservation", 2.0),
            LimitDefinition("idle", "token_bucket", 5.0, per_second=5.0),
            LimitDefinition("remote", "token_bucket", 5.0, per_second=5.0, store="redis"),
        ]
    )
    for _ in range(4):
        assert (await backend.acquire_token("api", 1.0, 10.0)).allowed
    for key in ("sms:a", "sms:a", "sms:b"):
        assert (await backend.acquire_window(key, 3, window)).allowed
    assert await backend.acquire_reservation("gpu", 2, uuid4(), uuid4(), SLOT_LEASE)
    usage = await backend.get_rate_limit_usage()
    rows = {(u.limit.name, u.instance): u.used for u in usage}
    api = rows.pop(("api", "api"))
    assert api is not None and 3.5 <= api <= 4.0  # four spent, a little refill since
    assert rows == {
        ("gpu", "gpu"): 1.0,
        ("idle", "idle"): 0.0,
        ("remote", "remote"): None,  # kept in Redis: not this backend's to read
        ("sms", "sms:a"): 2.0,
        ("sms", "sms:b"): 1.0,
    }
    assert [u.instance for u in usage if u.limit.name == "sms"] == ["sms:a", "sms:b"]
    assert [u.limit.name for u in usage] == sorted(u.limit.name for u in usage)
    await harness.travel(61)
    later = {u.instance: u.used for u in await backend.get_rate_limit_usage(instances_per_limit=1)}
    assert later["api"] == 0.0 and later["sms:a"] == 0.0 and "sms:b" not in later


async def test_an_unkeyed_limit_owns_its_name_alone(harness: Harness) -> None:
    backend = harness.backend
    await backend.register_rate_limits([LimitDefinition("gpu", "reservation", 2.0)])
    assert await backend.acquire_reservation("gpu:x", 1, uuid4(), uuid4(), SLOT_LEASE)
    assert await backend.acquire_reservation("queue-cap:mail", 3, uuid4(), uuid4(), SLOT_LEASE)
    usage = await backend.get_rate_limit_usage()
    assert [(u.instance, u.used) for u in usage] == [("gpu", 0.0)]


async def test_registering_again_takes_the_new_definition(harness: Harness) -> None:
    backend = harness.backend
    await backend.register_rate_limits([LimitDefinition("api", "token_bucket", 10.0, 1.0)])
    await backend.register_rate_limits([LimitDefinition("api", "token_bucket", 20.0, 2.0)])
    [usage] = await backend.get_rate_limit_usage()
    assert (usage.limit.capacity, usage.limit.per_second) == (20.0, 2.0)


IDLE = timedelta(hours=1)


async def test_idle_buckets_go_once_refilled_and_come_back_full(harness: Harness) -> None:
    backend = harness.backend
    # Burst 10 at 0.01/s: back to rest 1,000 s after its last use.
    await backend.register_rate_limits(
        [LimitDefinition("api", "token_bucket", 10.0, per_second=0.01, keyed=True)]
    )
    for key in ("api:a", "api:b"):
        for _ in range(10):
            assert (await backend.acquire_token(key, 0.01, 10.0)).allowed
    assert not (await backend.acquire_token("api:a", 0.01, 10.0)).allowed
    await harness.travel(3600 + 900)  # idle, but api:a's tokens are not all back yet
    # The line of api:a's denied call goes: its place (in 100 s) passed long enough ago.
    assert await backend.sweep_idle_limiter_state(IDLE) == (0, 0, 1)
    await harness.travel(200)
    assert (await backend.acquire_token("api:b", 0.01, 10.0)).allowed  # in use again: kept
    assert await backend.sweep_idle_limiter_state(IDLE) == (1, 0, 0)
    # A bucket without state is full: the same answer as before the sweep.
    grant = await backend.acquire_token("api:a", 0.01, 10.0)
    assert grant.allowed and grant.remaining == 9.0
    kept = await backend.acquire_token("api:b", 0.01, 10.0)
    assert kept.remaining is not None and 8.0 <= kept.remaining < 8.01  # its state kept


async def test_idle_window_keys_go_once_out_of_their_window(harness: Harness) -> None:
    backend = harness.backend
    window = timedelta(minutes=10)
    await backend.register_rate_limits(
        [LimitDefinition("sms", "sliding_window", 2.0, span=window, keyed=True)]
    )
    for key in ("sms:a", "sms:a", "sms:b"):
        assert (await backend.acquire_window(key, 2, window)).allowed
    await harness.travel(3600 + 300)
    assert await backend.sweep_idle_limiter_state(IDLE) == (0, 0, 0)  # within idle + span
    await harness.travel(301)
    assert await backend.sweep_idle_limiter_state(IDLE) == (0, 2, 0)
    for _ in range(2):  # the window is sized again at its next use: both uses free
        assert (await backend.acquire_window("sms:a", 2, window)).allowed
    assert not (await backend.acquire_window("sms:a", 2, window)).allowed


async def test_the_idle_sweep_is_bounded(harness: Harness) -> None:
    backend = harness.backend
    for key in ("x:1", "x:2", "x:3"):
        assert (await backend.acquire_token(key, 1.0, 1.0)).allowed
    await harness.travel(3601)  # no definition: idle alone counts
    assert await backend.sweep_idle_limiter_state(IDLE, limit=2) == (2, 0, 0)
    assert await backend.sweep_idle_limiter_state(IDLE, limit=2) == (1, 0, 0)
    assert await backend.sweep_idle_limiter_state(IDLE, limit=2) == (0, 0, 0)


async def test_denials_written_together_end_as_each_retry_after_would(harness: Harness) -> None:
    """``mark_denied_many``: a plain denial back to scheduled (its claim and the limit in the
    events, no attempt row); a cancel requested meanwhile wins; a delay past the deadline
    fails it; a start on the row keeps its attempt row; a lost lease writes nothing."""
    backend, worker = harness.backend, uuid4()
    plain, _ = await running_job(backend, worker=worker, started=False)
    cancelled, _ = await running_job(backend, worker=worker, started=False)
    assert await backend.write_cancel_request(cancelled.id, "operator") == "requested"
    late, _ = await running_job(
        backend, worker=worker, started=False, schedule_to_close=timedelta(seconds=30)
    )
    started, _ = await running_job(backend, worker=worker)
    lost, _ = await running_job(backend, started=False)  # another worker's lease
    delay = timedelta(minutes=5)
    denials = [
        Denied(job.id, job.attempt, delay, "rate_limit:api")
        for job in (plain, cancelled, late, started, lost)
    ]
    outcomes = await backend.mark_denied_many(worker, denials)
    assert outcomes == {
        plain.id: "scheduled",
        cancelled.id: "cancelled",
        late.id: "failed:DeadlineExceeded",
        started.id: "scheduled",
        lost.id: "noop",
    }
    row = await reload(backend, plain.id)
    assert (row.status, row.attempts_used, row.locked_by_worker) == (JobStatus.SCHEDULED, 0, None)
    assert await backend.get_attempts(plain.id) == []
    moves = [(e.from_status, e.to_status, e.detail) for e in await backend.get_events(plain.id)]
    assert moves[-2:] == [
        (JobStatus.PENDING, JobStatus.RUNNING, {}),
        (JobStatus.RUNNING, JobStatus.SCHEDULED, {"reason": "rate_limit:api"}),
    ]
    assert [a.outcome for a in await backend.get_attempts(started.id)] == ["retry_after"]
    assert (await reload(backend, lost.id)).status is JobStatus.RUNNING
