"""ActiveJobs' counts: what counts against the worker's capacity (claimed and running jobs,
not those whose outcome is being written) stays right through every move a holding makes,
superseded holdings and repeated calls included."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast
from uuid import UUID, uuid4

from hypothesis import given
from hypothesis import strategies as st

from taskq_core.backend.protocol import JobRow
from taskq_core.worker.active import ActiveJob, ActiveJobs, Stage

JOB_IDS = [uuid4() for _ in range(4)]
MOVES = st.lists(
    st.tuples(st.sampled_from(["claim", "start", "settle", "remove"]), st.integers(0, 3)),
    max_size=40,
)


def row(job_id: UUID) -> JobRow:
    return cast(JobRow, SimpleNamespace(id=job_id, locked_by_worker=uuid4(), attempt=1))


@given(MOVES)
def test_in_flight_counts_the_held_jobs_not_settling(moves: list[tuple[str, int]]) -> None:
    holdings = ActiveJobs()
    seen: list[ActiveJob] = []  # every holding made, superseded ones too
    for move, n in moves:
        if move == "claim":
            held, _ = holdings.claim(row(JOB_IDS[n]), renewed_at=0.0)
            seen.append(held)
            continue
        if not seen:
            continue
        held = seen[n % len(seen)]
        if move == "start" and held.stage is Stage.CLAIMED:
            holdings.start(held, now=0.0)
        elif move == "settle":
            holdings.settle(held)
        elif move == "remove":
            holdings.remove(held)
        current = holdings.all()
        assert holdings.in_flight() == sum(1 for h in current if h.stage is not Stage.SETTLING)
        assert holdings.holding() == len(current)
