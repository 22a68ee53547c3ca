"""Batches for applications: the failure policy, what waiting on a batch sees, and how
``wait_for_batch`` decides.

``client.enqueue_batch(items, failure_policy=AbortBatchAfter(n), finalizer=EnqueueItem(...))``
makes a batch (backend/protocol/batches.py says how it moves through its states);
``client.wait_for_batch(id)`` reads the batch's row and its children's counts and decides with
``decide_wait``, a pure function of those two reads (the decision table below).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal
from uuid import UUID

from taskq_core.backend.protocol.batches import BatchCounts, BatchStatus, ChildCounts
from taskq_core.statemachine import JobStatus

OnEmpty = Literal["error", "ok"]


@dataclass(frozen=True, slots=True)
class AbortBatchAfter:
    """Abort the batch once ``consecutive_failures`` of its children in a row ended failed: its
    pending and scheduled children are cancelled, running ones finish. A success resets the
    count."""

    consecutive_failures: int

    def __post_init__(self) -> None:
        if isinstance(self.consecutive_failures, bool) or not isinstance(
            self.consecutive_failures, int
        ):
            raise TypeError("AbortBatchAfter takes a whole number of consecutive failures")
        if self.consecutive_failures < 1:
            raise ValueError(
                f"AbortBatchAfter needs at least 1 consecutive failure, "
                f"got {self.consecutive_failures}"
            )


@dataclass(frozen=True, slots=True)
class BatchEnqueued:
    """What ``enqueue_batch_streaming`` made: the batch's id (every child's
    ``metadata.batch_id``) and how many children it inserted."""

    batch_id: UUID
    count: int


@dataclass(frozen=True, slots=True)
class BatchCompletionStatus(ChildCounts):
    """A batch as ``wait_for_batch`` found it: its live children by status (the ``jobs``
    table; the finalizer is not a child; ``total``, ``pending``), and its row's status
    (None: a batch without a row, enqueued with neither a failure policy nor a finalizer)."""

    batch_id: UUID
    status: BatchStatus | None
    by_status: Mapping[JobStatus, int] = field(default_factory=dict)

    # One property per terminal status, alike by shape only: each reads its own count.
    @property
    def succeeded(self) -> int:
        return self.of(JobStatus.SUCCEEDED)

    @property
    def failed(self) -> int:
        return self.of(JobStatus.FAILED)

    @property
    def cancelled(self) -> int:
        return self.of(JobStatus.CANCELLED)

    @property
    def crashed(self) -> int:
        return self.of(JobStatus.CRASHED)

    @property
    def abandoned(self) -> int:
        return self.of(JobStatus.ABANDONED)


class WaitDecision(Enum):
    """What ``wait_for_batch`` does after one look at the batch."""

    DONE = "done"  # return the BatchCompletionStatus
    NOT_YET = "not_yet"  # snooze mode: raise Snooze; blocking mode: look again later
    ABORTED = "aborted"  # raise BatchAbortedError
    EMPTY = "empty"  # raise EmptyBatchError


def decide_wait(
    counts: BatchCounts,
    row_status: BatchStatus | None,
    *,
    expect_at_least: int | None = None,
    on_empty: OnEmpty = "error",
) -> WaitDecision:
    """The decision table, first matching row wins (``pending``: children not terminal yet;
    ``row_status`` None: the batch has no row):

    ====================================================  =========
    row aborted, pending 0                                ABORTED
    row aborted, pending > 0                              NOT_YET
    ``expect_at_least`` set, pending 0, total below it    EMPTY
    total 0, a row                                        DONE
    total 0, no row, ``on_empty="ok"``                    DONE
    total 0, no row, ``on_empty="error"``                 EMPTY
    pending > 0                                           NOT_YET
    row active, pending 0                                 NOT_YET
    otherwise                                             DONE
    ====================================================  =========

    The next-to-last row covers a moment: every child is terminal but the last
    outcome's hook has not moved the row yet (it runs just after the child's write commits;
    the leader's sweep does it if the hook was lost). Waiting that moment out makes a batch
    whose last child tripped its failure policy end in ABORTED, never in a DONE that reads
    ``active``.
    """
    pending, total = counts.pending, counts.total
    if row_status is BatchStatus.ABORTED:
        return WaitDecision.ABORTED if pending == 0 else WaitDecision.NOT_YET
    if expect_at_least is not None and pending == 0 and total < expect_at_least:
        return WaitDecision.EMPTY
    if total == 0:
        if row_status is not None or on_empty == "ok":
            return WaitDecision.DONE
        return WaitDecision.EMPTY
    if pending > 0 or row_status is BatchStatus.ACTIVE:
        return WaitDecision.NOT_YET
    return WaitDecision.DONE
