"""The batch protocol's pure rules: the outcome table's counter, the grouping of a hook's
outcomes, and the stored finalizer's round trip."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import BatchOutcome, EnqueueArgs
from taskq_core.backend.protocol.batches import (
    BatchTally,
    count_failures,
    finalizer_from_json,
    finalizer_to_json,
    outcomes_by_batch,
)
from taskq_core.statemachine import JobStatus as S


def test_count_failures_follows_the_outcome_table() -> None:
    assert count_failures(0, 3, [S.FAILED, S.FAILED]) == (2, False)
    assert count_failures(2, 3, [S.SUCCEEDED]) == (0, False)
    assert count_failures(1, 3, [S.CANCELLED, S.CRASHED, S.ABANDONED]) == (1, False)
    assert count_failures(1, 2, [S.FAILED]) == (2, True)
    assert count_failures(0, None, [S.FAILED] * 10) == (10, False)


def test_count_failures_stops_at_the_abort() -> None:
    # The abort happens at the second failure; the success after it no longer counts.
    assert count_failures(0, 2, [S.FAILED, S.FAILED, S.SUCCEEDED]) == (2, True)
    assert count_failures(0, 2, [S.FAILED, S.SUCCEEDED, S.FAILED]) == (1, False)


def test_outcomes_by_batch_keeps_each_batchs_order_and_drops_non_terminal_statuses() -> None:
    first, second = uuid4(), uuid4()
    grouped = outcomes_by_batch(
        [
            BatchOutcome(second, S.FAILED),
            BatchOutcome(first, S.SUCCEEDED),
            BatchOutcome(second, S.SCHEDULED),
            BatchOutcome(second, S.SUCCEEDED),
            BatchOutcome(first, S.RUNNING),
        ]
    )
    assert list(grouped) == [second, first]
    assert grouped == {
        second: BatchTally([S.FAILED, S.SUCCEEDED], ended=2),
        first: BatchTally([S.SUCCEEDED], ended=1),
    }


def test_a_counted_outcome_ends_that_many_children_and_counts_each_failure() -> None:
    batch = uuid4()
    tally = outcomes_by_batch(
        [
            BatchOutcome(batch, S.SUCCEEDED, count=300),
            BatchOutcome(batch, S.FAILED, count=2),
            BatchOutcome(batch, S.CANCELLED, count=3),
        ]
    )[batch]
    assert tally.ended == 305
    assert count_failures(1, None, tally.statuses) == (2, False)  # the run reset it first
    assert count_failures(0, 2, tally.statuses) == (2, True)  # two failures reach 2


def test_a_finalizer_round_trips_through_its_stored_json() -> None:
    args = EnqueueArgs(
        actor="finalize",
        payload={"n": [1, 2]},
        queue="reports",
        priority=5,
        delay=timedelta(seconds=1.5),
        identity_key="i",
        fairness_key="f",
        schedule_to_close=timedelta(hours=1),
        retry_kind="non_retryable",
        max_attempts=1,
        result_ttl=timedelta(days=1),
        metadata={"finalizes_batch": "b"},
        trace_id="t",
        span_id="s",
        job_id=uuid4(),
        unique_key="report",
        unique_for=timedelta(minutes=5),
    )
    assert finalizer_from_json(finalizer_to_json(args)) == args
