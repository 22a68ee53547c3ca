"""wait_for_batch's decision table (``decide_wait``), row by row, and what the worker's batch
hook reads from each terminal write's answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import JobRow
from taskq_core.backend.protocol.batches import BATCH_ID_KEY, BatchCounts, BatchStatus
from taskq_core.batches import (
    AbortBatchAfter,
    BatchCompletionStatus,
    WaitDecision,
    decide_wait,
)
from taskq_core.statemachine import JobStatus
from taskq_core.worker.batch_hook import (
    outcome_of,
    status_if_cancelled,
    status_of_reschedule,
)

ABORTED, ACTIVE, COMPLETE = BatchStatus.ABORTED, BatchStatus.ACTIVE, BatchStatus.COMPLETE
DONE, NOT_YET = WaitDecision.DONE, WaitDecision.NOT_YET
RAISE_ABORTED, EMPTY = WaitDecision.ABORTED, WaitDecision.EMPTY


def job_row(metadata: dict[str, Any]) -> JobRow:
    """A stand-in row: the hook reads a job's id and metadata and nothing else."""
    return cast(JobRow, SimpleNamespace(id=uuid4(), metadata=metadata))


def counts(**by_status: int) -> BatchCounts:
    return BatchCounts({JobStatus(name): n for name, n in by_status.items() if n})


@pytest.mark.parametrize(
    ("row", "children", "options", "expected"),
    [
        # row aborted, nothing left running: BatchAbortedError (even with expect_at_least)
        (ABORTED, counts(failed=2, cancelled=5), {}, RAISE_ABORTED),
        (ABORTED, counts(failed=2), {"expect_at_least": 10}, RAISE_ABORTED),
        # row aborted, a child still running: wait (snooze) for it
        (ABORTED, counts(failed=2, running=1, cancelled=3), {}, NOT_YET),
        # expect_at_least set, none left, fewer than expected: EmptyBatchError
        (COMPLETE, counts(succeeded=3), {"expect_at_least": 4}, EMPTY),
        (None, counts(), {"expect_at_least": 1, "on_empty": "ok"}, EMPTY),
        # expect_at_least met: the rows below decide
        (COMPLETE, counts(succeeded=4), {"expect_at_least": 4}, DONE),
        # expect_at_least not met but children still to come: wait
        (ACTIVE, counts(pending=1), {"expect_at_least": 4}, NOT_YET),
        # no child, a row: the empty status
        (ACTIVE, counts(), {}, DONE),
        (COMPLETE, counts(), {}, DONE),
        # no child, no row: on_empty decides
        (None, counts(), {"on_empty": "ok"}, DONE),
        (None, counts(), {"on_empty": "error"}, EMPTY),
        (None, counts(), {}, EMPTY),
        # children not terminal: wait (snooze mode raises Snooze, blocking mode polls)
        (ACTIVE, counts(pending=1, succeeded=2), {}, NOT_YET),
        (ACTIVE, counts(scheduled=1), {}, NOT_YET),
        (None, counts(running=1, failed=1), {}, NOT_YET),
        # every child terminal but the last hook has not moved the row yet: wait for it
        (ACTIVE, counts(succeeded=3, failed=1), {}, NOT_YET),
        # otherwise: the completion status
        (COMPLETE, counts(succeeded=3, failed=1, crashed=1), {}, DONE),
        (None, counts(succeeded=3, cancelled=1, abandoned=1), {}, DONE),
    ],
)
def test_every_row_of_the_decision_table(
    row: BatchStatus | None,
    children: BatchCounts,
    options: dict[str, Any],
    expected: WaitDecision,
) -> None:
    assert decide_wait(children, row, **options) is expected


def test_the_completion_status_counts_children_by_status() -> None:
    status = BatchCompletionStatus(
        uuid4(),
        COMPLETE,
        {JobStatus.SUCCEEDED: 5, JobStatus.FAILED: 2, JobStatus.CRASHED: 1},
    )
    assert (status.total, status.pending) == (8, 0)
    assert (status.succeeded, status.failed, status.crashed, status.cancelled) == (5, 2, 1, 0)


def test_abort_batch_after_takes_a_positive_whole_number() -> None:
    assert AbortBatchAfter(3).consecutive_failures == 3
    with pytest.raises(ValueError, match="at least 1"):
        AbortBatchAfter(0)
    with pytest.raises(TypeError):
        AbortBatchAfter(True)


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ("scheduled", None),
        ("noop", None),
        ("cancelled", JobStatus.CANCELLED),
        ("failed", JobStatus.FAILED),
        ("failed:DeadlineExceeded", JobStatus.FAILED),
        ("failed:MaxAttemptsExceeded", JobStatus.FAILED),
    ],
)
def test_a_rescheduling_write_is_terminal_only_when_it_ended_the_job(
    answer: str, status: JobStatus | None
) -> None:
    assert status_of_reschedule(answer) is status


def test_the_hook_takes_only_terminal_writes_of_batch_children() -> None:
    batch_id = uuid4()
    child = job_row(metadata={BATCH_ID_KEY: str(batch_id)})
    loner = job_row(metadata={})
    outcome = outcome_of(child, JobStatus.FAILED)
    assert outcome is not None
    assert (outcome.batch_id, outcome.status) == (batch_id, JobStatus.FAILED)
    assert outcome_of(child, JobStatus.SCHEDULED) is None
    assert outcome_of(child, None) is None
    assert outcome_of(loner, JobStatus.FAILED) is None
    assert outcome_of(job_row(metadata={BATCH_ID_KEY: "not-a-uuid"}), JobStatus.FAILED) is None
    step = job_row(metadata={"workflow_id": str(uuid4())})
    ended = outcome_of(step, JobStatus.CANCELLED)
    assert ended is not None and ended.in_workflow and ended.batch_id is None
    assert ended.job_id == step.id
    assert status_if_cancelled(True) is JobStatus.CANCELLED
    assert status_if_cancelled(False) is None
