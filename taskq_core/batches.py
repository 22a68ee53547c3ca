"""Batches for applications: the failure policy a batch is enqueued with.

``client.enqueue_batch(items, failure_policy=AbortBatchAfter(n), finalizer=EnqueueItem(...))``
makes a batch (backend/protocol/batches.py says how it moves through its states).
"""

from __future__ import annotations

from dataclasses import dataclass


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
