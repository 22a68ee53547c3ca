"""Job progress on the job's row: the worker's fenced write of the latest report.

Readers need nothing new: ``get(job_id)`` returns ``progress_seq`` and ``progress_state``
(``taskq_core.progress.ProgressReport.of_row`` reads them).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from taskq_core.backend.protocol.values import Lease


@runtime_checkable
class ProgressBackend(Protocol):
    """The progress write a worker makes about a job it runs."""

    async def write_progress(self, lease: Lease, seq: int, state: dict[str, Any]) -> bool:
        """Store ``state`` (JSON) as the job's progress with ``seq``, if the job is running
        under ``lease`` (its worker, its attempt) and ``seq`` is greater than the stored
        one: ``progress_seq`` only grows, and a worker that lost the job writes nothing.
        True when written. No event row: progress is not a status change."""
        ...
