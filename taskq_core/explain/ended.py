"""The checks of a job that is not waiting: terminal (a poison job apart), archived, running."""

from __future__ import annotations

from typing import Any

from taskq_core.backend.protocol import (
    ArchivedJob,
    JobRow,
)
from taskq_core.backend.protocol.poison import worker_crashes
from taskq_core.durations import format_duration
from taskq_core.explain.answer import (
    Check,
    ago,
    plural,
    stamp,
    when,
)
from taskq_core.explain.facts import JobFacts
from taskq_core.statemachine import RETRYABLE_STATUSES, JobStatus


def terminal_check(c: JobFacts) -> Check:
    job = c.job
    finished = when(c.now, job.finished_at) if job.finished_at else "at an unknown time"
    attempts = f"{job.attempts_used} of {job.attempt_budget} attempt(s) used"
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


def poison_check(c: JobFacts) -> Check:
    job = c.job
    finished = when(c.now, job.finished_at) if job.finished_at else "at an unknown time"
    workers = [str(event.worker_id) for event in worker_crashes(c.events)]
    named = f" ({', '.join(workers)})" if workers else ""
    message = (
        f"it is a poison job: {plural(len(workers), 'worker')} died while running it{named}, "
        f"so the reclaim sweep failed it {finished} instead of handing it out again "
        "(TASKQ_POISON_RECLAIMS); look at its payload and actor first: "
        f"taskq retry {job.id} runs it again"
    )
    facts = _ended_facts(job, retryable=True)
    facts["crashed_workers"] = workers
    return Check("poison_job", True, message, facts)


# Alike backend/memory/admin.py's _policy by shape only: a dict of named fields, other data.
def _outcome_facts(job: JobRow) -> dict[str, Any]:
    """When a job ended, its attempts and its last error."""
    return {
        "finished_at": job.finished_at,
        "attempt": job.attempt,
        "attempts_used": job.attempts_used,
        "max_attempts": job.max_attempts,
        "error_class": job.error_class,
        "error_message": job.error_message,
    }


def _ended_facts(job: JobRow, *, retryable: bool) -> dict[str, Any]:
    """The facts of a job that has ended, and whether a retry can run it again."""
    return {**_outcome_facts(job), "retryable": retryable}


def archived_check(archived: ArchivedJob) -> Check:
    job = archived.job
    how = {
        JobStatus.SUCCEEDED: "succeeded",
        JobStatus.CANCELLED: "was cancelled",
        JobStatus.ABANDONED: "was abandoned",
    }.get(job.status, job.status.value)
    finished = f" at {stamp(job.finished_at)}" if job.finished_at else ""
    message = (
        f"it is archived: it {how}{finished} and the prune moved it to the archive at "
        f"{stamp(archived.archived_at)}, so nothing will run it; the archive deletes it at "
        f"{stamp(archived.expire_at)} (its events were deleted when it was archived, by design)"
    )
    facts: dict[str, Any] = {
        "archived_at": archived.archived_at,
        "expire_at": archived.expire_at,
        **_outcome_facts(job),
    }
    return Check("archived", True, message, facts)


def running_check(c: JobFacts) -> Check:
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
        "claimed": job.is_claimed,
        "attempts_spent": job.attempts_spent,
    }
    where = f"worker {job.locked_by_worker}"
    if worker is not None:
        where += f" ({worker.hostname} pid {worker.pid})"
    if worker is not None and c.is_live(worker):
        if job.started_at is None:  # claimed: its body has not started
            since = when(c.now, job.claimed_at) if job.claimed_at else "an unknown time"
            message = (
                f"it is claimed by {where} since {since}, waiting for a free consumer "
                f"(prefetched; its body has not started), as attempt #{job.attempt}"
            )
        else:
            since = when(c.now, job.started_at)
            message = f"it is running on {where} since {since}, attempt #{job.attempt}"
        message += f" ({job.attempts_spent} of {job.attempt_budget} used)"
        if job.cancel_requested_at is not None:
            message += f"; a cancel was requested {ago(c.now, job.cancel_requested_at)}"
        return Check("running", True, message, facts)
    if worker is None:
        seen = "that has no registration"
    elif worker.status != "running":
        seen = f"that stopped {ago(c.now, worker.stopped_at or worker.last_seen_at)}"
    else:
        seen = (
            f"last seen {ago(c.now, worker.last_seen_at)} (stale after "
            f"{format_duration(c.settings.worker_stale_after)})"
        )
    held = "claimed by" if job.is_claimed else "running on"
    message = f"it is {held} {where} {seen}"
    if reclaim_at is None:
        message += "; it has no lease, so nothing reclaims it"
    elif reclaim_at > c.now:
        message += f"; reclaim due at {when(c.now, reclaim_at)}"
    else:
        message += f"; reclaim overdue since {when(c.now, reclaim_at)}"
        if not c.leader_is_live():
            message += ": no live leader runs the reclaim sweep"
    facts["leader_live"] = c.leader_is_live()
    return Check("worker_stale", True, message, facts)
