"""The facts explain's checks read about one job, fetched once through the Backend protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from taskq_core.backend.protocol import (
    EventRow,
    JobRow,
    JobSummary,
    LeaderRow,
    QueueRow,
    WorkerRow,
)
from taskq_core.explain.answer import (
    ExplainSettings,
)
from taskq_core.liveness import heard_from, worker_is_alive


@dataclass
class JobFacts:
    """Everything the checks read, fetched once through the Backend protocol (``explain_job``
    fills in the fields past ``settings`` as the job's status needs them)."""

    job: JobRow
    now: datetime
    ahead: int
    ahead_other_cohorts: int
    mode: str
    settings: ExplainSettings
    workers: list[WorkerRow] = field(default_factory=list)
    leader: LeaderRow | None = None
    queue: QueueRow | None = None
    actor_cap: int | None = None
    actor_queue: str | None = None  # the queue the actor registered, if it did
    actor_running: list[JobSummary] = field(default_factory=list)
    queue_running: list[JobSummary] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)

    def is_live(self, worker: WorkerRow) -> bool:
        """Registered as running and heard from within the staleness window."""
        return worker_is_alive(worker, self.now, self.settings.worker_stale_after)

    def leader_is_live(self) -> bool:
        """A leader row whose worker pinged it within the staleness window."""
        return self.leader is not None and heard_from(
            self.leader.last_seen_at, self.now, self.settings.worker_stale_after
        )

    def consumers(self) -> list[WorkerRow]:
        """Live workers whose queues include the job's queue."""
        return [w for w in self.workers if self.is_live(w) and self.job.queue in w.queues]
