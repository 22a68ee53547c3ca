"""Denied jobs come back paced: a rate limit's store gives each denied call the next place of
the limit's line, fleet-wide, one limit interval after the previous one, so a fleet brings a
backlog back about as fast as the limit admits it and a backlog costs about one denial per job
(each denial is a dispatch and a write), also across a restart of the fleet. A simulation on
the memory store and a FakeClock: jobs return exactly when their denial said, each to whichever
worker."""

from __future__ import annotations

import heapq
from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core import ConcurrencyReservation, TokenBucket, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.clock import FakeClock
from taskq_core.ratelimit.gate import Denial, RateLimiter
from taskq_core.ratelimit.pacing import DenialLines
from taskq_core.ratelimit.registry import RateLimitRegistry

RATE = 10.0


@actor(rate_limits=[TokenBucket("api", RATE)])
async def call(payload: dict) -> None: ...


@actor(reservations=[ConcurrencyReservation("gpu", 1)])
async def render(payload: dict) -> None: ...


async def simulate(
    workers: int, jobs: int, *, pause_at: float | None = None, pause: float = 0.0
) -> tuple[int, float]:
    """(denials, seconds) for ``workers`` limiters draining ``jobs`` claimed at once. With
    ``pause_at``, the fleet stops then for ``pause`` seconds and a new one (limiters that
    never denied anything) takes over: the jobs due meanwhile are all claimed when it starts.
    """
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    plans = RateLimitRegistry().resolve([call])

    def new_fleet() -> list[RateLimiter]:
        return [
            RateLimiter(plans, store, store, clock=clock, lease=timedelta(minutes=1))
            for _ in range(workers)
        ]

    fleet = new_fleet()
    start = clock.monotonic()
    due: list[tuple[float, int, UUID]] = [(start, n, uuid4()) for n in range(jobs)]
    heapq.heapify(due)
    denials, turn = 0, 0
    while due:
        at, order, job = heapq.heappop(due)
        if pause_at is not None and at >= start + pause_at:
            clock.advance(start + pause_at + pause - clock.monotonic())
            fleet, pause_at = new_fleet(), None
        clock.advance(max(at - clock.monotonic(), 0.0))
        limiter = fleet[turn % workers]  # each return is claimed by whichever worker
        turn += 1
        verdict = await limiter.admit("call", {}, job, uuid4())
        if isinstance(verdict, Denial):
            denials += 1
            back = clock.monotonic() + verdict.retry_after.total_seconds()
            heapq.heappush(due, (back, order, job))
    return denials, clock.monotonic() - start


async def test_one_worker_brings_a_backlog_back_at_the_limits_rate() -> None:
    denials, seconds = await simulate(workers=1, jobs=200)
    assert denials <= 200 + 20  # about one denial per job: each comes back when due
    assert seconds <= 200 / RATE + 1  # and the limit is used throughout


async def test_a_fleet_shares_the_line_so_jobs_are_seldom_denied_twice() -> None:
    denials, seconds = await simulate(workers=4, jobs=400)
    assert denials <= 400 * 1.1  # four workers, one line: about one denial per job
    assert seconds <= 400 / RATE + 1  # and the limit is used throughout


async def test_a_restarted_fleet_queues_behind_the_jobs_its_predecessor_denied() -> None:
    # The new fleet denies the jobs that came due while none ran (all but the burst) once
    # more, and places them after those still scheduled: workers with lines of their own
    # brought them back beside those, twice the limit's rate, for as long as the backlog.
    denials, seconds = await simulate(workers=4, jobs=400, pause_at=10.0, pause=10.0)
    assert denials <= 400 * 1.1 + 10 * RATE
    assert seconds <= 400 / RATE + 10 + 1


def test_a_line_places_each_denial_one_interval_after_the_last() -> None:
    clock = FakeClock()
    lines = DenialLines(clock)
    waits = [lines.place("api", timedelta(seconds=0.5), 0.1) for _ in range(3)]
    assert waits == [timedelta(seconds=0.5), timedelta(seconds=0.6), timedelta(seconds=0.7)]
    clock.advance(10)  # the line emptied meanwhile: the next waits only its retry_after
    assert lines.place("api", timedelta(seconds=0.2), 0.1) == timedelta(seconds=0.2)


async def test_a_reservations_denials_are_spaced_for_the_workers_that_run_the_actor() -> None:
    # A reservation's line is the worker's own: four workers each space their denials four
    # slot turnovers apart (1 s assumed until a hold was seen), so together they bring jobs
    # back about as fast as the slot frees.
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    limiter = RateLimiter(
        RateLimitRegistry().resolve([render]), store, store, clock=clock, lease=timedelta(minutes=1)
    )
    limiter.set_fleet({"render": 4})
    assert not isinstance(await limiter.admit("render", {}, uuid4(), uuid4()), Denial)
    waits = []
    for _ in range(2):
        denial = await limiter.admit("render", {}, uuid4(), uuid4())
        assert isinstance(denial, Denial) and denial.reason == "reservation:gpu"
        waits.append(denial.retry_after)
    assert waits == [timedelta(seconds=1), timedelta(seconds=5)]
