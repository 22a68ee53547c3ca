"""The checks of a waiting job (pending or scheduled), in the order dispatch meets them."""

from __future__ import annotations

from typing import Any

from taskq_core.backend.protocol import (
    EventRow,
    JobSummary,
)
from taskq_core.explain.answer import (
    Check,
    ago,
    name_jobs,
    plural,
    when,
)
from taskq_core.explain.facts import JobFacts
from taskq_core.statemachine import JobStatus


def _deadline(c: JobFacts) -> Check:
    deadline = c.job.schedule_to_close
    facts = {"schedule_to_close": deadline}
    if deadline is not None and deadline <= c.now:
        return Check(
            "deadline_passed",
            True,
            f"its deadline passed at {when(c.now, deadline)}: the deadline sweep fails it "
            "with DeadlineExceeded",
            facts,
        )
    message = "no deadline" if deadline is None else f"deadline {when(c.now, deadline)}"
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


def _held_by_limit(c: JobFacts) -> Check:
    job = c.job
    denials = [(e, d) for e in c.events if (d := _limit_denial(e)) is not None]
    last = c.events[-1] if c.events else None
    facts: dict[str, Any] = {"limit": None, "kind": None, "denials": len(denials)}
    if not denials or last is not denials[-1][0]:
        return Check("rate_limited", False, "no rate limit or reservation holds it", facts)
    event, (kind, limit) = denials[-1]
    facts |= {"limit": limit, "kind": kind, "denied_at": event.occurred_at}
    what = f"{_LIMIT_KINDS[kind]} {limit!r}"
    times = f" ({plural(len(denials), 'time')} so far)" if len(denials) > 1 else ""
    if job.status is not JobStatus.SCHEDULED or job.scheduled_at <= c.now:
        return Check(
            "rate_limited",
            False,
            f"{what} held it back {ago(c.now, event.occurred_at)}{times}; it is due again",
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
        f"{what} holds it back: a worker claimed it {ago(c.now, event.occurred_at)} and "
        f"{why}, so it waits until {when(c.now, job.scheduled_at)} and then runs without "
        f"using an attempt{times}",
        facts,
    )


def _due(c: JobFacts) -> Check:
    job = c.job
    facts: dict[str, Any] = {"scheduled_at": job.scheduled_at, "leader_live": c.leader_is_live()}
    if job.scheduled_at > c.now:
        return Check(
            "scheduled", True, f"it is scheduled for {when(c.now, job.scheduled_at)}", facts
        )
    if job.status is JobStatus.SCHEDULED:
        message = f"it was due {ago(c.now, job.scheduled_at)} and waits to be made pending by "
        if c.leader_is_live():
            message += "the leader's scheduled sweep"
        else:
            message += "a leader, and no live worker is leading"
        return Check("scheduled", True, message, facts)
    return Check("scheduled", False, f"due since {when(c.now, job.scheduled_at)}", facts)


def _paused(c: JobFacts) -> Check:
    paused = c.queue is not None and c.queue.paused
    message = f"queue {c.job.queue!r} is {'paused' if paused else 'not paused'}"
    facts: dict[str, Any] = {"paused": paused}
    pause = c.queue.pause if c.queue is not None and paused else None
    if pause is not None:
        message += f", {ago(c.now, pause.paused_at)}"
        message += f" by {pause.paused_by}" if pause.paused_by else ""
        message += f": {pause.reason}" if pause.reason else ""
        facts |= {"paused_at": pause.paused_at, "by": pause.paused_by, "why": pause.reason}
    if paused:
        message += f" (taskq queues resume {c.job.queue} lets it run)"
    return Check("queue_paused", paused, message, facts)


def _other_queue(c: JobFacts) -> Check:
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


def _consumers(c: JobFacts) -> Check:
    live = c.consumers()
    stale = [w for w in c.workers if not c.is_live(w) and c.job.queue in w.queues]
    facts = {"live_workers": [w.id for w in live], "stale_workers": [w.id for w in stale]}
    if live:
        return Check(
            "no_live_worker",
            False,
            f"{plural(len(live), 'live worker')} consume{'s' if len(live) == 1 else ''} "
            f"{c.job.queue!r}",
            facts,
        )
    message = f"queue {c.job.queue!r} is consumed by no live worker"
    if stale:
        newest = max(w.last_seen_at for w in stale)
        message += (
            f" ({plural(len(stale), 'worker')} that consumed it last seen {ago(c.now, newest)})"
        )
    return Check("no_live_worker", True, message, facts)


def _registered(c: JobFacts) -> Check:
    live = c.consumers()
    having = [w for w in live if c.job.actor in w.actors]
    facts = {"workers_with_actor": [w.id for w in having]}
    if not live:
        return Check("actor_not_registered", False, "no live consumer to ask", facts)
    if having:
        verb = "registers" if len(having) == 1 else "register"
        message = f"{plural(len(having), 'live consumer')} {verb} actor {c.job.actor!r}"
        return Check("actor_not_registered", False, message, facts)
    return Check(
        "actor_not_registered",
        True,
        f"no live worker consuming {c.job.queue!r} registers actor {c.job.actor!r}: a worker "
        "that claims it snoozes it until one that knows the actor comes",
        facts,
    )


def _slots(c: JobFacts) -> Check:
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
    return Check("workers_busy", False, f"{plural(free, 'free slot')} on live consumers", facts)


def _queue_capacity(c: JobFacts) -> Check:
    cap = None if c.queue is None else c.queue.max_concurrent
    return _capacity("queue_capacity_full", f"queue {c.job.queue!r}", cap, c.queue_running)


def _actor_capacity(c: JobFacts) -> Check:
    subject = f"actor {c.job.actor!r}"
    return _capacity(
        "actor_capacity_full", subject, c.actor_cap, c.actor_running, unlimited=" (unlimited)"
    )


def _capacity(
    name: str, subject: str, cap: int | None, running: list[JobSummary], *, unlimited: str = ""
) -> Check:
    """Whether ``subject`` (a queue or an actor) is at its max_concurrent ``cap``."""
    facts = {"max_concurrent": cap, "running_job_ids": [j.id for j in running]}
    if cap is None:
        return Check(name, False, f"{subject} has no max_concurrent{unlimited}", facts)
    if len(running) >= cap:
        named = f": running {name_jobs(running)}" if running else ""
        return Check(
            name,
            True,
            f"{subject} is at its max_concurrent {cap} "
            f"({plural(len(running), 'running job')}){named}",
            facts,
        )
    return Check(name, False, f"{subject} runs {len(running)} of max_concurrent {cap}", facts)


def _identity(c: JobFacts) -> Check:
    key = c.job.identity_key
    if key is None:
        return Check("identity_key_held", False, "it has no identity key", {"identity_key": None})
    holder = next((j for j in c.actor_running if j.identity_key == key), None)
    facts = {"identity_key": key, "held_by": None if holder is None else holder.id}
    if holder is None:
        return Check(
            "identity_key_held", False, f"no running job holds identity key {key!r}", facts
        )
    since = f" since {when(c.now, holder.started_at)}" if holder.started_at else ""
    return Check(
        "identity_key_held",
        True,
        f"job {holder.id} holds identity key {key!r} (running on worker "
        f"{holder.locked_by_worker}{since})",
        facts,
    )


def _turn(c: JobFacts) -> Check:
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
            f"it waits its fairness turn behind {plural(c.ahead_other_cohorts, 'job')} of "
            f"other cohorts ({c.ahead} ahead in all, round_robin by fairness_key)"
        )
    else:
        message = f"it waits behind {plural(c.ahead, 'job')} of queue {c.job.queue!r} "
        message += "(strict_fifo: priority, then age)"
    return Check("waiting_turn", True, message, facts)


WAITING_CHECKS = (
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
