"""Why is this job not running? ``explain_job`` answers it from the Backend protocol alone.

A job is in one of four situations, and each has its own checks:

- **terminal**: it finished for good; the one finding says how (last error, attempts used,
  cancel reason) and when. A poison job (failed by the reclaim sweep because its workers
  kept dying while running it) has its own finding, ``poison_job``, naming those workers.
- **running**: it is claimed by a worker. The question is whether that worker is alive:
  its ``last_seen_at`` older than ``worker_stale_after`` means the heartbeat stopped, and the
  leader's reclaim sweep takes the job back once its lease (plus the cancel headroom when a
  cancel is in flight) has passed: that moment is named.
- **archived**: it finished long enough ago that the prune moved it to the archive; nothing
  will run it again, and the finding says when it was archived and when the archive lets go
  of it (its events were deleted when it was archived, by design).
- **waiting** (pending or scheduled): every blocker the dispatch path has, checked in the
  order dispatch meets them: deadline passed, held back by a rate limit or a reservation (a
  worker claimed it and the limit said no: its last event names the limit), not yet due
  (or due but not yet promoted by
  the leader), queue paused, the actor registered on another queue than the job's (a job
  enqueued by name before its actor's first worker came), no live worker consuming the
  queue, no live consumer that registers the actor, every consumer at full concurrency, the
  queue's ``max_concurrent`` full, the actor's ``max_concurrent`` full, another job holding
  the identity key, and finally the jobs ahead of it in the queue's dispatch order (its
  fairness turn).

Every check is reported, whether it applies or not; the verdict is the first that applies.
Times come from the backend's clock (``get_dispatch_position``), never the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from taskq_core.backend.protocol import (
    ArchivedJob,
    Backend,
    EventRow,
    JobRow,
    JobSummary,
    LeaderRow,
    QueueRow,
    WorkerRow,
)
from taskq_core.backend.protocol.admin import JobQuery
from taskq_core.backend.protocol.poison import is_poison, worker_crashes
from taskq_core.constants import CANCEL_RECLAIM_HEADROOM
from taskq_core.durations import format_duration
from taskq_core.errors import JobNotFoundError
from taskq_core.liveness import DEFAULT_STALE_AFTER, heard_from, worker_is_alive, worker_stale_after
from taskq_core.settings import TaskqSettings
from taskq_core.statemachine import RETRYABLE_STATUSES, JobStatus

Situation = Literal["terminal", "archived", "running", "waiting"]

# How many job ids a finding names before it says "and N more".
_NAMED_JOBS = 5
# The most running jobs of one actor or queue a capacity check reads (a fleet runs fewer).
_RUNNING_MAX = 100_000
# The default graces (TASKQ_CANCELLATION_GRACE_PERIOD + TASKQ_CLEANUP_GRACE_PERIOD), read from
# the settings model so the two never disagree.
_DEFAULT_GRACES = timedelta(
    seconds=TaskqSettings.model_fields["cancellation_grace_period"].default
    + TaskqSettings.model_fields["cleanup_grace_period"].default
)


@dataclass(frozen=True)
class ExplainSettings:
    """How explain judges liveness and reclaim timing (filled from TaskqSettings).

    ``worker_stale_after``: a worker (or leader) not seen for longer has lost its
    heartbeat. ``cancel_reclaim_headroom``: added to a running job's lease when a cancel is
    in flight (cancellation grace + cleanup grace + CANCEL_RECLAIM_HEADROOM, as the reclaim
    sweep does).
    """

    worker_stale_after: timedelta = DEFAULT_STALE_AFTER
    cancel_reclaim_headroom: timedelta = _DEFAULT_GRACES + CANCEL_RECLAIM_HEADROOM

    @classmethod
    def from_settings(cls, settings: TaskqSettings) -> ExplainSettings:
        """The workers' own cadences: liveness as ``taskq_core.liveness`` derives it, and the
        reclaim sweep's cancel headroom."""
        graces = settings.cancellation_grace_period + settings.cleanup_grace_period
        return cls(
            worker_stale_after=worker_stale_after(settings),
            cancel_reclaim_headroom=timedelta(seconds=graces) + CANCEL_RECLAIM_HEADROOM,
        )


@dataclass(frozen=True)
class Check:
    """One blocker the design has, whether it applies to this job, and the fact behind it.

    ``code`` is a stable snake_case name (scripts match on it); ``message`` says it in words.
    """

    code: str
    applies: bool
    message: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """The answer: the job, the backend's now, every check made and the verdict.

    ``now`` is None for an archived job: nothing in the live tables was read, and its
    finding names absolute times only.
    """

    job: JobRow
    now: datetime | None
    situation: Situation
    checks: list[Check]

    @property
    def origin(self) -> str | None:
        """Where the job came from, when a cron schedule made it (see ``job_origin``)."""
        return job_origin(self.job)

    @property
    def verdict(self) -> Check:
        """The first check that applies; a ``runnable`` finding when none does."""
        for check in self.checks:
            if check.applies:
                return check
        return Check(
            "runnable",
            True,
            "nothing blocks it: the next dispatch of a worker consuming "
            f"{self.job.queue!r} should claim it",
        )


def job_origin(job: JobRow) -> str | None:
    """``from schedule NAME (fire time T)``, or ``(run by hand)`` for ``taskq schedules run``,
    read from the metadata a schedule's job carries (``schedule``, ``fire_time``,
    ``manual``); None for a job no schedule made."""
    name = job.metadata.get("schedule")
    if not isinstance(name, str):
        return None
    if job.metadata.get("manual"):
        return f"from schedule {name} (run by hand)"
    fire_time = job.metadata.get("fire_time")
    return f"from schedule {name}" + (f" (fire time {fire_time})" if fire_time else "")


def _ago(now: datetime, then: datetime) -> str:
    delta = now - then
    if delta < timedelta(0):
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _when(now: datetime, then: datetime) -> str:
    return f"{_stamp(then)} ({_ago(now, then)})"


def _name_jobs(jobs: Sequence[JobSummary]) -> str:
    named = ", ".join(str(job.id) for job in jobs[:_NAMED_JOBS])
    more = len(jobs) - _NAMED_JOBS
    return named + (f" and {more} more" if more > 0 else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class _Context:
    """Everything the checks read, fetched once through the Backend protocol."""

    def __init__(
        self,
        job: JobRow,
        now: datetime,
        ahead: int,
        ahead_other_cohorts: int,
        mode: str,
        settings: ExplainSettings,
    ) -> None:
        self.job = job
        self.now = now
        self.ahead = ahead
        self.ahead_other_cohorts = ahead_other_cohorts
        self.mode = mode
        self.settings = settings
        self.workers: list[WorkerRow] = []
        self.leader: LeaderRow | None = None
        self.queue: QueueRow | None = None
        self.actor_cap: int | None = None
        self.actor_queue: str | None = None  # the queue the actor registered, if it did
        self.actor_running: list[JobSummary] = []
        self.queue_running: list[JobSummary] = []
        self.events: list[EventRow] = []

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


async def _running_jobs(
    backend: Backend,
    *,
    actors: tuple[str, ...] | None = None,
    queues: tuple[str, ...] | None = None,
) -> list[JobSummary]:
    """The running jobs of an actor or a queue, as summaries: their payloads and results are
    not read (a page that explains a job is refreshed every few seconds)."""
    query = JobQuery(
        statuses=(JobStatus.RUNNING,), actors=actors, queues=queues, limit=_RUNNING_MAX, count_max=0
    )
    return (await backend.search_jobs(query)).jobs


async def explain_job(
    backend: Backend, job_id: UUID, settings: ExplainSettings | None = None
) -> Explanation:
    """Check every blocker for ``job_id`` in dispatch order; an archived job is explained
    as archived; JobNotFoundError if neither ``jobs`` nor the archive holds it."""
    settings = settings or ExplainSettings()
    job = await backend.get(job_id)
    position = await backend.get_dispatch_position(job_id)
    if job is None or position is None:
        # Not live (or pruned between the two reads): the archive may hold it.
        archived = await backend.get_archived_job(job_id)
        if archived is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return Explanation(archived.job, None, "archived", [_archived(archived)])
    context = _Context(
        job, position.now, position.ahead, position.ahead_other_cohorts, position.mode, settings
    )
    if job.is_terminal:
        if is_poison(job):
            context.events = await backend.get_events(job.id)
            return Explanation(job, position.now, "terminal", [_poison(context)])
        return Explanation(job, position.now, "terminal", [_terminal(context)])
    context.workers = await backend.list_workers()
    context.leader = await backend.get_leader()
    if job.status is JobStatus.RUNNING:
        return Explanation(job, position.now, "running", [_running(context)])
    context.queue = await backend.get_queue(job.queue)
    context.events = await backend.get_events(job.id)
    config = await backend.get_actor_config(job.actor)
    context.actor_cap = None if config is None else config.max_concurrent
    context.actor_queue = None if config is None else config.queue
    context.actor_running = await _running_jobs(backend, actors=(job.actor,))
    if context.queue is not None and context.queue.max_concurrent is not None:
        context.queue_running = await _running_jobs(backend, queues=(job.queue,))
    checks = [check(context) for check in _WAITING_CHECKS]
    return Explanation(job, position.now, "waiting", checks)


# --- terminal and running -----------------------------------------------------------------------
def _terminal(c: _Context) -> Check:
    job = c.job
    finished = _when(c.now, job.finished_at) if job.finished_at else "at an unknown time"
    attempts = f"{job.attempts_used} of {job.max_attempts} attempt(s) used"
    facts = _ended_facts(job, retryable=job.status in RETRYABLE_STATUSES)
    error = f"{job.error_class}: {job.error_message}" if job.error_class else None
    if job.status is JobStatus.SUCCEEDED:
        message = f"it succeeded {finished}; {attempts}"
    elif job.status is JobStatus.CANCELLED:
        reason = f" (reason: {job.cancel_reason})" if job.cancel_reason else ""
        message = f"it was cancelled {finished}{reason}; {attempts}"
        facts["cancel_reason"] = job.cancel_reason
    elif job.status is JobStatus.ABANDONED:
        message = (
            f"it was abandoned {finished}: a cancel was forced and the actor did not stop; "
            f"{attempts}"
        )
    else:
        why = f": last error {error}" if error else ""
        message = f"it {job.status.value} {finished}{why}; {attempts}"
    if job.status in RETRYABLE_STATUSES:
        message += f" (taskq retry {job.id} runs it again)"
    return Check("terminal", True, message, facts)


def _poison(c: _Context) -> Check:
    job = c.job
    finished = _when(c.now, job.finished_at) if job.finished_at else "at an unknown time"
    workers = [str(event.worker_id) for event in worker_crashes(c.events)]
    named = f" ({', '.join(workers)})" if workers else ""
    message = (
        f"it is a poison job: {_plural(len(workers), 'worker')} died while running it{named}, "
        f"so the reclaim sweep failed it {finished} instead of handing it out again "
        "(TASKQ_POISON_RECLAIMS); look at its payload and actor first: "
        f"taskq retry {job.id} runs it again"
    )
    facts = _ended_facts(job, retryable=True)
    facts["crashed_workers"] = workers
    return Check("poison_job", True, message, facts)


def _ended_facts(job: JobRow, *, retryable: bool) -> dict[str, Any]:
    """The facts of a job that has ended: when, its attempts, its last error."""
    return {
        "finished_at": job.finished_at,
        "attempt": job.attempt,
        "attempts_used": job.attempts_used,
        "max_attempts": job.max_attempts,
        "error_class": job.error_class,
        "error_message": job.error_message,
        "retryable": retryable,
    }


def _archived(archived: ArchivedJob) -> Check:
    job = archived.job
    how = {
        JobStatus.SUCCEEDED: "succeeded",
        JobStatus.CANCELLED: "was cancelled",
        JobStatus.ABANDONED: "was abandoned",
    }.get(job.status, job.status.value)
    finished = f" at {_stamp(job.finished_at)}" if job.finished_at else ""
    message = (
        f"it is archived: it {how}{finished} and the prune moved it to the archive at "
        f"{_stamp(archived.archived_at)}, so nothing will run it; the archive deletes it at "
        f"{_stamp(archived.expire_at)} (its events were deleted when it was archived, by design)"
    )
    facts: dict[str, Any] = {
        "archived_at": archived.archived_at,
        "expire_at": archived.expire_at,
        "finished_at": job.finished_at,
        "attempt": job.attempt,
        "attempts_used": job.attempts_used,
        "max_attempts": job.max_attempts,
        "error_class": job.error_class,
        "error_message": job.error_message,
    }
    return Check("archived", True, message, facts)


def _running(c: _Context) -> Check:
    job = c.job
    worker = next((w for w in c.workers if w.id == job.locked_by_worker), None)
    reclaim_at = job.lock_expires_at
    if reclaim_at is not None and job.cancel_requested_at is not None:
        reclaim_at += c.settings.cancel_reclaim_headroom
    facts: dict[str, Any] = {
        "worker_id": job.locked_by_worker,
        "claimed_at": job.claimed_at,
        "started_at": job.started_at,
        "lock_expires_at": job.lock_expires_at,
        "reclaim_at": reclaim_at,
        "worker_last_seen_at": worker.last_seen_at if worker else None,
        "cancel_requested_at": job.cancel_requested_at,
    }
    where = f"worker {job.locked_by_worker}"
    if worker is not None:
        where += f" ({worker.hostname} pid {worker.pid})"
    if worker is not None and c.is_live(worker):
        if job.started_at is None:
            since = _when(c.now, job.claimed_at) if job.claimed_at else "an unknown time"
            message = (
                f"it is claimed by {where} since {since}, waiting for a free consumer "
                f"(prefetched; its body has not started), attempt #{job.attempt}"
            )
        else:
            since = _when(c.now, job.started_at)
            message = f"it is running on {where} since {since}, attempt #{job.attempt}"
        message += f" ({job.attempts_used} of {job.max_attempts} used)"
        if job.cancel_requested_at is not None:
            message += f"; a cancel was requested {_ago(c.now, job.cancel_requested_at)}"
        return Check("running", True, message, facts)
    if worker is None:
        seen = "that has no registration"
    elif worker.status != "running":
        seen = f"that stopped {_ago(c.now, worker.stopped_at or worker.last_seen_at)}"
    else:
        seen = (
            f"last seen {_ago(c.now, worker.last_seen_at)} (stale after "
            f"{format_duration(c.settings.worker_stale_after)})"
        )
    message = f"it is running on {where} {seen}"
    if reclaim_at is None:
        message += "; it has no lease, so nothing reclaims it"
    elif reclaim_at > c.now:
        message += f"; reclaim due at {_when(c.now, reclaim_at)}"
    else:
        message += f"; reclaim overdue since {_when(c.now, reclaim_at)}"
        if not c.leader_is_live():
            message += ": no live leader runs the reclaim sweep"
    facts["leader_live"] = c.leader_is_live()
    return Check("worker_stale", True, message, facts)


# --- waiting: the checks in dispatch order -------------------------------------------------------
def _deadline(c: _Context) -> Check:
    deadline = c.job.schedule_to_close
    facts = {"schedule_to_close": deadline}
    if deadline is not None and deadline <= c.now:
        return Check(
            "deadline_passed",
            True,
            f"its deadline passed at {_when(c.now, deadline)}: the deadline sweep fails it "
            "with DeadlineExceeded",
            facts,
        )
    message = "no deadline" if deadline is None else f"deadline {_when(c.now, deadline)}"
    return Check("deadline_passed", False, message, facts)


# What a worker's admission writes as the event's reason: "<kind>:<limit>" (ratelimit.gate).
_LIMIT_KINDS = {
    "rate_limit": "rate limit",
    "reservation": "reservation",
    "limit_store_unavailable": "the store of rate limit",
}


def _limit_denial(event: EventRow) -> tuple[str, str] | None:
    """(kind, limit) when ``event`` is a worker's rate-limit denial of the job."""
    reason = event.detail.get("reason")
    if event.to_status is not JobStatus.SCHEDULED or not isinstance(reason, str):
        return None
    kind, _, limit = reason.partition(":")
    return (kind, limit) if kind in _LIMIT_KINDS and limit else None


def _held_by_limit(c: _Context) -> Check:
    job = c.job
    denials = [(e, d) for e in c.events if (d := _limit_denial(e)) is not None]
    last = c.events[-1] if c.events else None
    facts: dict[str, Any] = {"limit": None, "kind": None, "denials": len(denials)}
    if not denials or last is not denials[-1][0]:
        return Check("rate_limited", False, "no rate limit or reservation holds it", facts)
    event, (kind, limit) = denials[-1]
    facts |= {"limit": limit, "kind": kind, "denied_at": event.occurred_at}
    what = f"{_LIMIT_KINDS[kind]} {limit!r}"
    times = f" ({_plural(len(denials), 'time')} so far)" if len(denials) > 1 else ""
    if job.status is not JobStatus.SCHEDULED or job.scheduled_at <= c.now:
        return Check(
            "rate_limited",
            False,
            f"{what} held it back {_ago(c.now, event.occurred_at)}{times}; it is due again",
            facts,
        )
    why = {
        "rate_limit": "the limit was used up",
        "reservation": "every slot was held",
        "limit_store_unavailable": "the limit could not be checked",
    }[kind]
    return Check(
        "rate_limited",
        True,
        f"{what} holds it back: a worker claimed it {_ago(c.now, event.occurred_at)} and "
        f"{why}, so it waits until {_when(c.now, job.scheduled_at)} and then runs without "
        f"using an attempt{times}",
        facts,
    )


def _due(c: _Context) -> Check:
    job = c.job
    facts: dict[str, Any] = {"scheduled_at": job.scheduled_at, "leader_live": c.leader_is_live()}
    if job.scheduled_at > c.now:
        return Check(
            "scheduled", True, f"it is scheduled for {_when(c.now, job.scheduled_at)}", facts
        )
    if job.status is JobStatus.SCHEDULED:
        message = f"it was due {_ago(c.now, job.scheduled_at)} and waits to be made pending by "
        if c.leader_is_live():
            message += "the leader's scheduled sweep"
        else:
            message += "a leader, and no live worker is leading"
        return Check("scheduled", True, message, facts)
    return Check("scheduled", False, f"due since {_when(c.now, job.scheduled_at)}", facts)


def _paused(c: _Context) -> Check:
    paused = c.queue is not None and c.queue.paused
    message = f"queue {c.job.queue!r} is {'paused' if paused else 'not paused'}"
    facts: dict[str, Any] = {"paused": paused}
    pause = c.queue.pause if c.queue is not None and paused else None
    if pause is not None:
        message += f", {_ago(c.now, pause.paused_at)}"
        message += f" by {pause.paused_by}" if pause.paused_by else ""
        message += f": {pause.reason}" if pause.reason else ""
        facts |= {"paused_at": pause.paused_at, "by": pause.paused_by, "why": pause.reason}
    if paused:
        message += f" (taskq queues resume {c.job.queue} lets it run)"
    return Check("queue_paused", paused, message, facts)


def _other_queue(c: _Context) -> Check:
    job = c.job
    home = c.actor_queue
    facts = {"actor_queue": home, "job_queue": job.queue}
    if home is None:
        return Check("actor_on_other_queue", False, f"actor {job.actor!r} is unregistered", facts)
    if home == job.queue:
        return Check(
            "actor_on_other_queue", False, f"actor {job.actor!r} is registered on {home!r}", facts
        )
    # A live worker of the job's queue that knows the actor runs it all the same.
    if any(job.actor in w.actors for w in c.consumers()):
        return Check(
            "actor_on_other_queue",
            False,
            f"actor {job.actor!r} is registered on {home!r}, and a live worker consuming "
            f"{job.queue!r} registers it too",
            facts,
        )
    return Check(
        "actor_on_other_queue",
        True,
        f"actor {job.actor!r} is registered on queue {home!r}, but this job waits in queue "
        f"{job.queue!r}, which no live worker with the actor consumes (it was enqueued before "
        f"the actor was registered, or with --queue): a worker consuming {job.queue!r} with "
        f"the actor runs it, or cancel it and enqueue it again on {home!r}",
        facts,
    )


def _consumers(c: _Context) -> Check:
    live = c.consumers()
    stale = [w for w in c.workers if not c.is_live(w) and c.job.queue in w.queues]
    facts = {"live_workers": [w.id for w in live], "stale_workers": [w.id for w in stale]}
    if live:
        return Check(
            "no_live_worker",
            False,
            f"{_plural(len(live), 'live worker')} consume{'s' if len(live) == 1 else ''} "
            f"{c.job.queue!r}",
            facts,
        )
    message = f"queue {c.job.queue!r} is consumed by no live worker"
    if stale:
        newest = max(w.last_seen_at for w in stale)
        message += (
            f" ({_plural(len(stale), 'worker')} that consumed it last seen {_ago(c.now, newest)})"
        )
    return Check("no_live_worker", True, message, facts)


def _registered(c: _Context) -> Check:
    live = c.consumers()
    having = [w for w in live if c.job.actor in w.actors]
    facts = {"workers_with_actor": [w.id for w in having]}
    if not live:
        return Check("actor_not_registered", False, "no live consumer to ask", facts)
    if having:
        verb = "registers" if len(having) == 1 else "register"
        message = f"{_plural(len(having), 'live consumer')} {verb} actor {c.job.actor!r}"
        return Check("actor_not_registered", False, message, facts)
    return Check(
        "actor_not_registered",
        True,
        f"no live worker consuming {c.job.queue!r} registers actor {c.job.actor!r}: a worker "
        "that claims it snoozes it until one that knows the actor comes",
        facts,
    )


def _slots(c: _Context) -> Check:
    live = c.consumers()
    busy = [w for w in live if w.running_jobs >= w.concurrency]
    facts = {
        "workers": [
            {"id": w.id, "running_jobs": w.running_jobs, "concurrency": w.concurrency} for w in live
        ]
    }
    if live and len(busy) == len(live):
        loads = ", ".join(f"{w.running_jobs}/{w.concurrency}" for w in live)
        return Check(
            "workers_busy",
            True,
            f"every live worker consuming {c.job.queue!r} is at full concurrency ({loads} jobs)",
            facts,
        )
    if not live:
        return Check("workers_busy", False, "no live consumer to ask", facts)
    free = sum(max(w.concurrency - w.running_jobs, 0) for w in live)
    return Check("workers_busy", False, f"{_plural(free, 'free slot')} on live consumers", facts)


def _queue_capacity(c: _Context) -> Check:
    cap = None if c.queue is None else c.queue.max_concurrent
    running = c.queue_running
    facts = {"max_concurrent": cap, "running_job_ids": [j.id for j in running]}
    if cap is None:
        return Check(
            "queue_capacity_full", False, f"queue {c.job.queue!r} has no max_concurrent", facts
        )
    if len(running) >= cap:
        named = f": running {_name_jobs(running)}" if running else ""
        return Check(
            "queue_capacity_full",
            True,
            f"queue {c.job.queue!r} is at its max_concurrent {cap} "
            f"({_plural(len(running), 'running job')}){named}",
            facts,
        )
    return Check(
        "queue_capacity_full",
        False,
        f"queue {c.job.queue!r} runs {len(running)} of max_concurrent {cap}",
        facts,
    )


def _actor_capacity(c: _Context) -> Check:
    cap = c.actor_cap
    running = c.actor_running
    facts = {"max_concurrent": cap, "running_job_ids": [j.id for j in running]}
    if cap is None:
        return Check(
            "actor_capacity_full",
            False,
            f"actor {c.job.actor!r} has no max_concurrent (unlimited)",
            facts,
        )
    if len(running) >= cap:
        named = f": running {_name_jobs(running)}" if running else ""
        return Check(
            "actor_capacity_full",
            True,
            f"actor {c.job.actor!r} is at its max_concurrent {cap} "
            f"({_plural(len(running), 'running job')}){named}",
            facts,
        )
    return Check(
        "actor_capacity_full",
        False,
        f"actor {c.job.actor!r} runs {len(running)} of max_concurrent {cap}",
        facts,
    )


def _identity(c: _Context) -> Check:
    key = c.job.identity_key
    if key is None:
        return Check("identity_key_held", False, "it has no identity key", {"identity_key": None})
    holder = next((j for j in c.actor_running if j.identity_key == key), None)
    facts = {"identity_key": key, "held_by": None if holder is None else holder.id}
    if holder is None:
        return Check(
            "identity_key_held", False, f"no running job holds identity key {key!r}", facts
        )
    since = f" since {_when(c.now, holder.started_at)}" if holder.started_at else ""
    return Check(
        "identity_key_held",
        True,
        f"job {holder.id} holds identity key {key!r} (running on worker "
        f"{holder.locked_by_worker}{since})",
        facts,
    )


def _turn(c: _Context) -> Check:
    facts = {
        "mode": c.mode,
        "ahead": c.ahead,
        "ahead_other_cohorts": c.ahead_other_cohorts,
        "fairness_key": c.job.fairness_key,
    }
    if c.job.status is not JobStatus.PENDING or c.job.scheduled_at > c.now:
        return Check("waiting_turn", False, "not in the dispatch order until it is due", facts)
    if c.ahead == 0:
        return Check(
            "waiting_turn", False, f"it is next in {c.job.queue!r} ({c.mode} order)", facts
        )
    if c.mode == "round_robin":
        message = (
            f"it waits its fairness turn behind {_plural(c.ahead_other_cohorts, 'job')} of "
            f"other cohorts ({c.ahead} ahead in all, round_robin by fairness_key)"
        )
    else:
        message = f"it waits behind {_plural(c.ahead, 'job')} of queue {c.job.queue!r} "
        message += "(strict_fifo: priority, then age)"
    return Check("waiting_turn", True, message, facts)


_WAITING_CHECKS = (
    _deadline,
    _held_by_limit,
    _due,
    _paused,
    _other_queue,
    _consumers,
    _registered,
    _slots,
    _queue_capacity,
    _actor_capacity,
    _identity,
    _turn,
)
