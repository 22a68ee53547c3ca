"""The worker's batch hook pipe: outcomes gather for a moment and go in one call, in the order
they came; a failure goes at once; each job stays held until its outcome was applied, also
when the call fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast
from uuid import uuid4

from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.batches import BATCH_ID_KEY, BatchOutcome, BatchTransition
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY
from taskq_core.statemachine import JobStatus
from taskq_core.worker.active import ActiveJob, ActiveJobs
from taskq_core.worker.batch_hook import HookPipe, succeeded_children


class RecordingBackend:
    """Records each apply_batch_outcomes call; ``fail`` makes the calls raise."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[list[BatchOutcome]] = []
        self.fail = fail
        self.called = asyncio.Event()

    async def apply_batch_outcomes(self, outcomes: Sequence[BatchOutcome]) -> list[BatchTransition]:
        self.calls.append(list(outcomes))
        self.called.set()
        if self.fail:
            raise ConnectionError("database away")
        return []


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    info = warning


def held_child(holdings: ActiveJobs, batch: str) -> ActiveJob:
    """A job held by the worker, child of ``batch``."""
    row = SimpleNamespace(
        id=uuid4(), metadata={BATCH_ID_KEY: batch}, locked_by_worker=uuid4(), attempt=1
    )
    held, _ = holdings.claim(cast(JobRow, row), renewed_at=0.0)
    return held


def pipe(backend: RecordingBackend, holdings: ActiveJobs, log: Log, **options: Any) -> HookPipe:
    return HookPipe(cast(Backend, backend), log, holdings, **options)


async def test_outcomes_gather_into_one_call_in_order_and_release_their_jobs() -> None:
    backend, holdings, log = RecordingBackend(), ActiveJobs(), Log()
    hooks = pipe(backend, holdings, log, linger=0.2)
    batch = str(uuid4())
    first, second, third = (held_child(holdings, batch) for _ in range(3))
    hooks.submit([(BatchOutcome(uuid4(), JobStatus.SUCCEEDED), [first])])
    applied = hooks.submit_write(second, JobStatus.CANCELLED)
    assert hooks.submit_write(third, JobStatus.SCHEDULED) is None  # not an ending
    assert applied is not None
    await asyncio.wait_for(applied, 5)
    assert [[o.status for o in call] for call in backend.calls] == [
        [JobStatus.SUCCEEDED, JobStatus.CANCELLED]
    ]
    assert holdings.get(first.job.id) is None and holdings.get(second.job.id) is None
    assert holdings.get(third.job.id) is third  # its caller releases it


async def test_a_failure_goes_without_lingering() -> None:
    backend, holdings, log = RecordingBackend(), ActiveJobs(), Log()
    hooks = pipe(backend, holdings, log, linger=3600.0)
    batch = str(uuid4())
    success, failure = held_child(holdings, batch), held_child(holdings, batch)
    assert hooks.submit_write(success, JobStatus.SUCCEEDED) is not None
    applied = hooks.submit_write(failure, JobStatus.FAILED)
    assert applied is not None
    await asyncio.wait_for(applied, 5)
    assert [[o.status for o in call] for call in backend.calls] == [
        [JobStatus.SUCCEEDED, JobStatus.FAILED]
    ]


async def test_close_applies_what_waits_at_once() -> None:
    backend, holdings, log = RecordingBackend(), ActiveJobs(), Log()
    hooks = pipe(backend, holdings, log, linger=3600.0)
    held = held_child(holdings, str(uuid4()))
    assert hooks.submit_write(held, JobStatus.SUCCEEDED) is not None
    await asyncio.wait_for(hooks.close(), 5)
    assert len(backend.calls) == 1 and holdings.holding() == 0


async def test_a_failing_call_is_logged_and_still_releases_the_jobs() -> None:
    backend, holdings, log = RecordingBackend(fail=True), ActiveJobs(), Log()
    hooks = pipe(backend, holdings, log, linger=0.0)
    held = held_child(holdings, str(uuid4()))
    applied = hooks.submit_write(held, JobStatus.ABANDONED)
    assert applied is not None
    await asyncio.wait_for(applied, 5)
    assert holdings.holding() == 0
    assert [event for event, _ in log.events] == ["batch_hook_failed"]


async def test_an_outcome_goes_without_lingering_once_nothing_else_is_claimed_or_running() -> None:
    backend, holdings, log = RecordingBackend(), ActiveJobs(), Log()
    hooks = pipe(backend, holdings, log, linger=3600.0)
    batch = str(uuid4())
    last, other = held_child(holdings, batch), held_child(holdings, batch)
    holdings.settle(last)  # its body ended; ``other`` is still claimed: the outcome lingers
    assert hooks.submit_write(last, JobStatus.SUCCEEDED) is not None
    await asyncio.sleep(0.05)
    assert backend.calls == []
    holdings.settle(other)  # the worker's last job: nothing more is coming
    applied = hooks.submit_write(other, JobStatus.SUCCEEDED)
    assert applied is not None
    await asyncio.wait_for(applied, 5)
    assert [[o.status for o in call] for call in backend.calls] == [[JobStatus.SUCCEEDED] * 2]


def test_a_flush_of_successes_is_one_counted_outcome_per_batch_and_one_per_step() -> None:
    holdings = ActiveJobs()
    first, second = str(uuid4()), str(uuid4())
    children = [held_child(holdings, batch) for batch in (first, second, first, first)]
    row = SimpleNamespace(
        id=uuid4(), metadata={WORKFLOW_ID_KEY: str(uuid4())}, locked_by_worker=uuid4(), attempt=1
    )
    step, _ = holdings.claim(cast(JobRow, row), renewed_at=0.0)
    hooked = succeeded_children([*children, step])
    assert [(type(o).__name__, o.status, len(jobs)) for o, jobs in hooked] == [
        ("Ended", JobStatus.SUCCEEDED, 1),
        ("BatchOutcome", JobStatus.SUCCEEDED, 3),
        ("BatchOutcome", JobStatus.SUCCEEDED, 1),
    ]
    counted = [o for o, _ in hooked if isinstance(o, BatchOutcome)]
    assert [(str(o.batch_id), o.count) for o in counted] == [(first, 3), (second, 1)]
    assert hooked[1][1] == [children[0], children[2], children[3]]


def test_a_flush_leaves_out_a_job_whose_batch_id_is_no_uuid() -> None:
    # metadata is the application's too: a batch_id that no batch made (a list, a typo) is
    # no batch, and the flush that wrote its success goes on.
    holdings = ActiveJobs()
    batch = str(uuid4())
    child = held_child(holdings, batch)
    strangers = [held_child(holdings, cast(str, odd)) for odd in (["a"], "not-a-uuid", 7)]
    hooked = succeeded_children([*strangers, child])
    assert [(str(o.batch_id), jobs) for o, jobs in hooked if isinstance(o, BatchOutcome)] == [
        (batch, [child])
    ]
