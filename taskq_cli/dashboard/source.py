"""The dashboard's read model: where what ``taskq top`` and the web UI show comes from.

TopApp never touches a Backend: it asks a ``DashboardSource`` for a ``Snapshot`` (one per
refresh), a ``JobDetail`` (the detail screen) and the operator actions. The admin web UI
reads through the same source, and also pages through jobs (``search_jobs``, the keyset read
of ``taskq jobs list``), names a job by a piece of its id, and lists and shows batches.
``BackendSource`` implements the protocol over any Backend with the protocol's index-backed
reads, so one refresh stays cheap on a large ``jobs`` table. Nothing in this package imports
Textual: the web UI loads it without the terminal stack.

Who paused a queue and why is not part of the dashboard read: ``BackendSource`` reads the
note of a paused queue (``get_queue``) when it sees the queue paused, and again only after
``DashboardSettings.pause_note_max_age`` (``get_queue`` counts the queue's jobs, too dear
for every refresh), so a refresh with paused queues costs no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, TypeVar
from uuid import UUID

from taskq_cli.batch_progress import FAILED_STATUSES, BatchProgress, read_job_batch, read_progress
from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.snapshot import BatchDetail, JobDetail, Snapshot, WorkerView
from taskq_cli.job_ids import resolve_job_id
from taskq_cli.operator import operator_id
from taskq_cli.replica import StalenessWatch
from taskq_cli.workflow_progress import dashboard_workflows, read_job_workflow
from taskq_core.backend.protocol import (
    Backend,
    CancelOutcome,
    JobSummary,
    LimitDefinition,
    LimitUsage,
    QueueActivity,
    QueueRow,
    WorkerRow,
)

# Not re-exported by the package.
from taskq_core.backend.protocol.admin import Audit, JobPage, JobQuery, QueuePause
from taskq_core.backend.protocol.batches import BatchFilter
from taskq_core.backend.protocol.workflows import WorkflowFilter, WorkflowRow, WorkflowStatus
from taskq_core.explain import ExplainSettings, Explanation, explain_job
from taskq_core.liveness import WorkerState, worker_state
from taskq_core.worker_alerts import WorkerAck, acknowledge_stale_worker

_STATE_ORDER: dict[WorkerState, int] = {"running": 0, "stale": 1, "stopped": 2}

T = TypeVar("T")


class DashboardSource(Protocol):
    """What TopApp reads and changes. ``database`` and ``schema`` label the header."""

    database: str
    schema: str

    async def snapshot(self, jobs: JobsFilter) -> Snapshot:
        """Everything one refresh shows; the jobs pane lists what ``jobs`` selects."""

    async def job_detail(self, job_id: UUID) -> JobDetail | None:
        """One job with attempts and events (or archived, with attempts only); None when
        neither the jobs table nor the archive holds it."""

    async def search_jobs(self, query: JobQuery) -> JobPage:
        """One page of the jobs ``query`` selects, newest first, with the total and the
        next page's position (``taskq jobs list``'s read)."""

    async def resolve_job_id(self, text: str) -> UUID:
        """The job a whole id or a unique prefix or suffix names (live or archived);
        JobNotFoundError when none, ConfigError when the piece is ambiguous."""

    async def list_batches(self, filter: BatchFilter) -> list[BatchProgress]:
        """Batches with a row, newest first, with their children's counts."""

    async def batch_detail(self, batch_id: UUID, failures: int = 5) -> BatchDetail | None:
        """One batch's progress and its latest ``failures`` failed children; None when it
        has neither a row nor a child in the jobs table."""

    async def cancel_job(self, job_id: UUID) -> CancelOutcome:
        """Cancel a waiting job at once or ask its worker to stop a running one."""

    async def retry_job(self, job_id: UUID) -> bool:
        """Re-pend a failed, crashed or cancelled job; False when it is none of those."""

    async def set_queue_paused(
        self, queue: str, paused: bool, reason: str | None = None
    ) -> QueueRow:
        """Pause (with the operator's reason, recorded with who and when) or resume a queue
        (workers stop or resume claiming its jobs)."""

    async def explain(self, job_id: UUID) -> Explanation:
        """The ``taskq jobs explain`` answer for one job (JobNotFoundError when gone)."""

    async def acknowledge_worker(self, worker_id: UUID, now: datetime) -> WorkerAck:
        """Acknowledge a stale worker's silence as judged at ``now`` (a snapshot's), recorded
        with who (the operator) in the operator log (``taskq workers ack``)."""

    async def staleness(self) -> str | None:
        """How far behind its primary the replica the reads go to is, briefly (``12ms
        behind the primary``; None: they go to the primary)."""


@dataclass(frozen=True)
class DashboardSettings:
    """What a refresh reads: the window of the failure counts, sparkline minutes, how many
    jobs the pane lists, how many active batches the batches pane shows, how many workflows
    the workflows pane shows (running ones first, then those that ended within the window),
    how long stopped workers stay listed, how old a paused queue's note may get before it
    is read again (another operator may pause it anew), who a pause note names (None: this
    shell's ``user@host``), and how ``jobs explain`` judges (its ``worker_stale_after`` is
    also when a silent worker counts as stale)."""

    window: timedelta = timedelta(hours=1)
    minutes: int = 20
    jobs_limit: int = 100
    batches_limit: int = 5
    workflows_limit: int = 5
    stopped_visible_for: timedelta = timedelta(hours=1)
    pause_note_max_age: timedelta = timedelta(minutes=5)
    cancel_reason: str = "cancelled from taskq top"
    operator: str | None = None
    explain: ExplainSettings = field(default_factory=ExplainSettings)

    @property
    def stale_after(self) -> timedelta:
        """A worker silent for longer is stale (the workers' own cadence)."""
        return self.explain.worker_stale_after


class LimitUsageReader(Protocol):
    """Where rate limits kept outside the backend are read (RedisLimiterStore.usage)."""

    async def usage(
        self, limits: Sequence[LimitDefinition], instances_per_limit: int = 20
    ) -> list[LimitUsage]:
        """These limits' instances and their use now."""


@dataclass
class BackendSource:
    """A DashboardSource over any Backend: seven reads per refresh, run concurrently.

    ``limit_store`` reads the rate limits whose state the workers keep in Redis (without it
    their use shows as unknown); a failing read leaves it unknown for that refresh.
    ``replica``: ``backend`` reads a replica (its staleness goes with every snapshot) and
    the operator's writes go to ``writer``, the primary (None: ``backend`` is the primary).
    """

    backend: Backend
    database: str
    schema: str
    settings: DashboardSettings = field(default_factory=DashboardSettings)
    limit_store: LimitUsageReader | None = None
    writer: Backend | None = None
    replica: StalenessWatch | None = None
    # Paused queue -> (its pause note, when it was read on the backend's clock).
    _pause_notes: dict[str, tuple[QueuePause | None, datetime]] = field(
        default_factory=dict, init=False, repr=False
    )

    async def snapshot(self, jobs: JobsFilter) -> Snapshot:
        """Queue activity, workers, the jobs pane, limits, active batches and workflows,
        read concurrently; then the notes of paused queues not read lately."""
        settings = self.settings
        # One more batch than shown, to tell whether more are active.
        batch_filter = BatchFilter(active=True, limit=settings.batches_limit + 1)
        # Every read ends before one's error goes up: the backend is closed after it, and a
        # read still running then would fail with nobody to hear it.
        reads = asyncio.gather(
            self.backend.get_dashboard_stats(settings.window, settings.minutes),
            self.backend.list_workers(),
            self.backend.list_recent_jobs(jobs.job_filter(settings.jobs_limit)),
            self.backend.get_rate_limit_usage(),
            self.backend.list_batches(batch_filter),
            self._workflows(),
            return_exceptions=True,
        )
        read, staleness = await asyncio.gather(reads, self.staleness(), return_exceptions=True)
        read, staleness = _value(read), _value(staleness)
        stats, workers, rows, limits, batches, (running_rows, newest) = (
            _value(read[0]),
            _value(read[1]),
            _value(read[2]),
            _value(read[3]),
            _value(read[4]),
            _value(read[5]),
        )
        workflows, more_workflows = dashboard_workflows(
            running_rows, newest, settings.workflows_limit, stats.now - stats.window
        )
        return Snapshot(
            now=stats.now,
            window=stats.window,
            queues=stats.queues,
            workers=self._worker_views(workers, stats.now),
            jobs=rows,
            jobs_filter=jobs,
            stale_after=settings.stale_after,
            pauses=await self._pauses(stats.queues, stats.now),
            limits=await self._elsewhere(limits),
            batches=[
                BatchProgress(row.id, row, counts)
                for row, counts in batches[: settings.batches_limit]
            ],
            more_batches=len(batches) > settings.batches_limit,
            workflows=workflows,
            more_workflows=more_workflows,
            staleness=staleness,
        )

    @property
    def primary(self) -> Backend:
        """Where the operator's writes go."""
        return self.writer or self.backend

    async def staleness(self) -> str | None:
        """How far behind its primary the replica read is (None: reads go to the primary);
        read on the replica at most once a second."""
        return None if self.replica is None else await self.replica.refresh()

    async def _workflows(self) -> tuple[list[WorkflowRow], list[WorkflowRow]]:
        """The running workflows (one more than shown) and the newest of any status."""
        limit = self.settings.workflows_limit
        running, newest = await asyncio.gather(
            self.backend.list_workflows(WorkflowFilter(WorkflowStatus.RUNNING, limit + 1)),
            self.backend.list_workflows(WorkflowFilter(limit=limit)),
            return_exceptions=True,
        )
        return _value(running), _value(newest)

    async def _elsewhere(self, limits: list[LimitUsage]) -> list[LimitUsage]:
        """``limits`` with the use of those kept in Redis read there (when it can be)."""
        remote = [usage.limit for usage in limits if usage.used is None]
        if not remote or self.limit_store is None:
            return limits
        try:
            read = await self.limit_store.usage(remote)
        except Exception:  # Redis away: the dashboard shows their use as unknown
            return limits
        by_name: dict[str, list[LimitUsage]] = {}
        for usage in read:
            by_name.setdefault(usage.limit.name, []).append(usage)
        merged: list[LimitUsage] = []
        for usage in limits:
            if usage.used is None:
                merged += by_name.get(usage.limit.name, [usage])
            else:
                merged.append(usage)
        return merged

    async def _pauses(
        self, queues: Sequence[QueueActivity], now: datetime
    ) -> dict[str, QueuePause]:
        """The pause note of every paused queue: cached, read again when a queue was not
        paused at the last refresh or its note is older than ``pause_note_max_age``."""
        paused = {queue.name for queue in queues if queue.paused}
        for name in set(self._pause_notes) - paused:
            del self._pause_notes[name]
        max_age = self.settings.pause_note_max_age
        due = sorted(
            name
            for name in paused
            if name not in self._pause_notes or now - self._pause_notes[name][1] >= max_age
        )
        rows = await asyncio.gather(*(self.backend.get_queue(name) for name in due))
        for name, row in zip(due, rows, strict=True):
            self._pause_notes[name] = (None if row is None else row.pause, now)
        return {name: note for name, (note, _) in self._pause_notes.items() if note is not None}

    def _worker_views(self, workers: Sequence[WorkerRow], now: datetime) -> list[WorkerView]:
        """Live and stale workers, then recently stopped ones; stable order across refreshes."""
        views = []
        for worker in workers:
            state = worker_state(worker, now, self.settings.stale_after)
            stopped_at = worker.stopped_at or worker.last_seen_at
            if state == "stopped" and now - stopped_at > self.settings.stopped_visible_for:
                continue
            views.append(WorkerView(worker, state))
        views.sort(
            key=lambda v: (
                _STATE_ORDER[v.state],
                v.row.label or "",
                v.row.hostname,
                v.row.pid,
                str(v.row.id),
            )
        )
        return views

    async def job_detail(self, job_id: UUID) -> JobDetail | None:
        """The job, its attempts and its events; an archived job with its archived attempts;
        and the batch it belongs to or finalizes, and the workflow it is a step of."""
        job = await self.backend.get(job_id)
        if job is None:
            archived = await self.backend.get_archived_job(job_id)
            if archived is None:
                return None
            attempts, batch, workflow = await asyncio.gather(
                self.backend.get_archived_attempts(job_id),
                read_job_batch(self.backend, archived.job.metadata),
                read_job_workflow(self.backend, archived.job),
            )
            return JobDetail(archived.job, attempts, [], archived, batch, workflow)
        attempts, events, batch, workflow = await asyncio.gather(
            self.backend.get_attempts(job_id),
            self.backend.get_events(job_id),
            read_job_batch(self.backend, job.metadata),
            read_job_workflow(self.backend, job),
        )
        return JobDetail(job, attempts, events, batch=batch, workflow=workflow)

    async def search_jobs(self, query: JobQuery) -> JobPage:
        """``search_jobs`` of the backend: a keyset page, never an offset."""
        return await self.backend.search_jobs(query)

    async def resolve_job_id(self, text: str) -> UUID:
        """As ``taskq jobs show`` names a job (``taskq_cli.job_ids``)."""
        return await resolve_job_id(self.backend, text)

    async def list_batches(self, filter: BatchFilter) -> list[BatchProgress]:
        """``list_batches`` (one statement, its counts included)."""
        listed = await self.backend.list_batches(filter)
        return [BatchProgress(row.id, row, counts) for row, counts in listed]

    async def batch_detail(self, batch_id: UUID, failures: int = 5) -> BatchDetail | None:
        """The row and counts, then (when some failed) the latest failed children: a walk
        of the batch's own index entries."""
        progress = await read_progress(self.backend, batch_id)
        if progress.row is None and progress.counts.total == 0:
            return None
        failed: list[JobSummary] = []
        if progress.failed and failures > 0:
            failed = await self.backend.list_batch_jobs(batch_id, FAILED_STATUSES, failures)
        return BatchDetail(progress, failed)

    async def cancel_job(self, job_id: UUID) -> CancelOutcome:
        """``write_cancel_request`` with a reason naming the dashboard."""
        return await self.primary.write_cancel_request(job_id, self.settings.cancel_reason)

    async def retry_job(self, job_id: UUID) -> bool:
        """Operator retry (a fresh attempt budget)."""
        return await self.primary.retry_job(job_id)

    async def set_queue_paused(
        self, queue: str, paused: bool, reason: str | None = None
    ) -> QueueRow:
        """Upsert the queue row's ``paused`` flag; a pause records ``user@host`` and the
        reason, as ``taskq queues pause`` does."""
        self._pause_notes.pop(queue, None)  # read the new note at the next refresh
        if not paused:
            return await self.primary.update_queue(queue, paused=False)
        return await self.primary.update_queue(
            queue,
            paused=True,
            paused_by=self.settings.operator or operator_id(),
            pause_reason=reason or None,
        )

    async def explain(self, job_id: UUID) -> Explanation:
        """``explain_job`` with the workers' liveness and reclaim settings."""
        return await explain_job(self.backend, job_id, self.settings.explain)

    async def acknowledge_worker(self, worker_id: UUID, now: datetime) -> WorkerAck:
        """``acknowledge_stale_worker`` with the dashboards' liveness threshold."""
        by = Audit(by=self.settings.operator or operator_id())
        return await acknowledge_stale_worker(
            self.primary, worker_id, now, self.settings.stale_after, by
        )


def _value(result: T | BaseException) -> T:
    """A gathered read's value, or its error raised."""
    if isinstance(result, BaseException):
        raise result
    return result
