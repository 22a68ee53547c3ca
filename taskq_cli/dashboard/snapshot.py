"""What one read of the dashboard's source returns: a refresh's ``Snapshot`` (with its
``WorkerView`` rows), one job's ``JobDetail`` and one batch's ``BatchDetail``.

Plain frozen dataclasses over the Backend's rows, so ``taskq top``, the web UI and
``taskq jobs show`` render the same values each in its own way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from taskq_cli.batch_progress import BatchProgress, JobBatch
from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.workflow_progress import JobWorkflow
from taskq_core.backend.protocol import (
    ArchivedJob,
    AttemptRow,
    EventRow,
    JobRow,
    JobSummary,
    LimitUsage,
    QueueActivity,
    WorkerRow,
)

# Not re-exported by the package.
from taskq_core.backend.protocol.admin import QueuePause
from taskq_core.backend.protocol.workflows import WorkflowRow
from taskq_core.liveness import WorkerState, silence_acknowledged
from taskq_core.statemachine import JobStatus


@dataclass(frozen=True)
class WorkerView:
    """A worker row and what its heartbeat says: running, stale (silent too long), stopped."""

    row: WorkerRow
    state: WorkerState

    @property
    def acknowledged(self) -> bool:
        """A stale worker whose silence an operator acknowledged: it raises no alert."""
        return self.state == "stale" and silence_acknowledged(self.row)


@dataclass(frozen=True)
class Snapshot:
    """Everything one refresh shows, read at ``now`` on the backend's clock."""

    now: datetime
    window: timedelta
    queues: list[QueueActivity]
    workers: list[WorkerView]
    jobs: list[JobSummary]
    jobs_filter: JobsFilter
    stale_after: timedelta
    # Who paused each paused queue, when and why (a queue paused without a note is absent).
    pauses: dict[str, QueuePause] = field(default_factory=dict)
    # Each declared rate limit and reservation, and its use now (none declared: empty).
    limits: list[LimitUsage] = field(default_factory=list)
    # The newest active batches with a row, and whether more are active than these.
    batches: list[BatchProgress] = field(default_factory=list)
    more_batches: bool = False
    # Running workflows (the newest first), then those that ended within ``window``; and
    # whether more are running than these.
    workflows: list[WorkflowRow] = field(default_factory=list)
    more_workflows: bool = False
    # Read from a replica (TASKQ_PG_DSN_REPLICA): how far behind its primary it was, briefly.
    staleness: str | None = None

    @property
    def leader(self) -> WorkerView | None:
        """The maintenance leader's worker, if one leads."""
        return next((w for w in self.workers if w.row.is_leader), None)

    def claimed(self) -> int:
        """Jobs claimed ahead of a free consumer across queues (apart from ``RUNNING``'s
        total, which counts running bodies)."""
        return sum(queue.claimed for queue in self.queues)

    def totals(self) -> dict[JobStatus, int]:
        """Every status: exact counts for the active ones, terminal ones within the window
        (``RUNNING``: running bodies; the claimed jobs are ``claimed()``)."""
        totals = dict.fromkeys(JobStatus, 0)
        for queue in self.queues:
            totals[JobStatus.PENDING] += queue.pending
            totals[JobStatus.SCHEDULED] += queue.scheduled
            totals[JobStatus.RUNNING] += queue.running
            for status, count in queue.finished.items():
                totals[status] += count
        return totals

    @property
    def finished_per_minute(self) -> list[int]:
        """Finished jobs per minute across queues, oldest first."""
        if not self.queues:
            return []
        rows = [q.finished_per_minute for q in self.queues]
        return [sum(column) for column in zip(*rows, strict=True)]

    @property
    def finished_last_minute(self) -> int:
        """Jobs finished in the 60 seconds up to ``now``: the current rate."""
        per_minute = self.finished_per_minute
        return per_minute[-1] if per_minute else 0

    def finished_rate(self, minutes: int = 5) -> float:
        """Jobs finished per minute, averaged over the last ``minutes`` minutes."""
        recent = self.finished_per_minute[-minutes:]
        return sum(recent) / len(recent) if recent else 0.0


@dataclass(frozen=True)
class JobDetail:
    """One job with its attempts and event timeline, for the detail screen. ``archived`` is
    set for a job the prune moved to the archive (its events were deleted then: none)."""

    job: JobRow
    attempts: list[AttemptRow]
    events: list[EventRow]
    archived: ArchivedJob | None = None
    # The batch the job belongs to or finalizes, with its progress (None: no batch).
    batch: JobBatch | None = None
    # The workflow the job is a step of, and what a waiting step waits for (None: no step).
    workflow: JobWorkflow | None = None


@dataclass(frozen=True)
class BatchDetail:
    """One batch's progress and its latest failed children (newest first)."""

    progress: BatchProgress
    failures: list[JobSummary]
