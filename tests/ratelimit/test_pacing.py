"""Denied jobs come back paced: each worker's line spaces them one limit interval apart per
live worker running the actor, so a fleet brings a backlog back about as fast as the limit
admits it and a backlog costs about one denial per job (each denial is a dispatch and a
write). A simulation on the memory store and a FakeClock: jobs return exactly when their
denial said, each to whichever worker."""

from __future__ import annotations

import heapq
from datetime import timedelta
from uuid import UUID, uuid4

from taskq_core import TokenBucket, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.clock import FakeClock
from taskq_core.ratelimit.gate import Denial, RateLimiter
from taskq_core.ratelimit.pacing import DenialLines
from taskq_core.ratelimit.registry import RateLimitRegistry

RATE = 10.0


@actor(rate_limits=[TokenBucket("api", RATE)])
async def call(payload: dict) -> None: ...


async def simulate(workers: int, jobs: int, *, counted: bool = True) -> tuple[int, float]:
    """(denials, seconds) for ``workers`` limiters draining ``jobs`` claimed at once;
    ``counted``: each knows how many workers run the actor (the heartbeat counts them)."""
    clock = FakeClock()
    store = InMemoryBackend(clock=clock)
    plans = RateLimitRegistry().resolve([call])
    fleet = [
        RateLimiter(plans, store, store, clock=clock, lease=timedelta(minutes=1))
        for _ in range(workers)
    ]
    for limiter in fleet:
        limiter.set_fleet({"call": workers if counted else 1})
    start = clock.monotonic()
    due: list[tuple[float, int, UUID]] = [(start, n, uuid4()) for n in range(jobs)]
    heapq.heapify(due)
    denials, turn = 0, 0
    while due:
        at, order, job = heapq.heappop(due)
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


async def test_a_fleet_spaces_its_lines_so_jobs_are_seldom_denied_twice() -> None:
    uncounted, _ = await simulate(workers=4, jobs=400, counted=False)
    denials, seconds = await simulate(workers=4, jobs=400)
    # Four lines spaced for one worker bring jobs back four times faster than admitted.
    assert uncounted > 3 * 400
    assert denials <= 400 * 1.1  # spaced for four: about one denial per job
    assert seconds <= 400 / RATE + 1  # and the limit is used throughout


def test_a_line_places_each_denial_one_interval_after_the_last() -> None:
    clock = FakeClock()
    lines = DenialLines(clock)
    waits = [lines.place("api", timedelta(seconds=0.5), 0.1) for _ in range(3)]
    assert waits == [timedelta(seconds=0.5), timedelta(seconds=0.6), timedelta(seconds=0.7)]
    clock.advance(10)  # the line emptied meanwhile: the next waits only its retry_after
    assert lines.place("api", timedelta(seconds=0.2), 0.1) == timedelta(seconds=0.2)
