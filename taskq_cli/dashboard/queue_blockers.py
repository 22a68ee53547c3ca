"""What holds back a queue whose oldest pending job is old: the "why" column of the queues
pane in ``taskq top`` and of the web UI's queues page.

Only what is true of the whole queue is said here, from the refresh's own snapshot (no extra
read): paused (how long ago, by whom and why, when the pause left a note), no live worker
consumes it, its ``max_concurrent`` is full, every live consumer is at full concurrency.
These are the queue-wide checks of ``jobs explain``, judged with the same liveness rule;
when none applies the blocker is per job (actor not registered, actor cap, identity key,
fairness turn) and ``e`` on one of its jobs says which.

Work that is not pending can wait too: a job claimed long ago whose worker's consumers are
all busy (prefetched behind long bodies: ``jobs explain`` says "claimed by worker W,
waiting for a free consumer"), and a scheduled job long due that no live maintenance leader
promotes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from taskq_cli import output
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_core.backend.protocol import QueueActivity
from taskq_core.backend.protocol.admin import QueuePause

PER_JOB = "per job (e)"
# Pending work older than this is "old": coloured, and the queues pane says why it waits.
OLD_PENDING = timedelta(minutes=1)


def queue_blocker(queue: QueueActivity, snapshot: Snapshot) -> str:
    """A few words on why the queue's work waits; empty when nothing waits long (a paused
    queue always says so: nothing of it will run). Pending work first, then claimed jobs,
    then due scheduled ones."""
    if queue.paused:
        return pause_text(snapshot.pauses.get(queue.name), snapshot.now)
    if _waited_long(queue.oldest_pending_at, snapshot.now):
        return _pending_blocker(queue, snapshot)
    if _waited_long(queue.oldest_claimed_at, snapshot.now):
        prefetched = _prefetch_blocker(queue, snapshot)
        if prefetched:
            return prefetched
    if _waited_long(queue.oldest_due_scheduled_at, snapshot.now):
        return _promotion_blocker(snapshot)
    return ""


def _waited_long(since: datetime | None, now: datetime) -> bool:
    return since is not None and now - since >= OLD_PENDING


def _prefetch_blocker(queue: QueueActivity, snapshot: Snapshot) -> str:
    """``claimed behind busy consumers on web-1 (2/2 +1 claimed)``: live workers of the
    queue that hold claimed jobs while every consumer of theirs runs a body."""
    busy = [
        view.row
        for view in snapshot.workers
        if view.state == "running"
        and queue.name in view.row.queues
        and view.row.claimed_jobs
        and view.row.running_jobs >= view.row.concurrency
    ]
    if not busy:
        return ""
    named = ", ".join(
        f"{row.label or f'{row.hostname}:{row.pid}'} "
        f"({output.worker_load(row.running_jobs, row.claimed_jobs, row.concurrency)})"
        for row in busy[:2]
    )
    more = f" and {len(busy) - 2} more" if len(busy) > 2 else ""
    return f"claimed behind busy consumers on {named}{more}"


def _promotion_blocker(snapshot: Snapshot) -> str:
    """A due scheduled job waits for the leader's promotion: say so when no live leader
    runs it (with one, the promotion is only late)."""
    leader = snapshot.leader
    if leader is None:
        return "scheduled jobs overdue: no leader to promote them"
    if leader.state != "running":
        return f"scheduled jobs overdue: the leader is {leader.state}"
    return "scheduled jobs overdue: the leader has not promoted them"


def _pending_blocker(queue: QueueActivity, snapshot: Snapshot) -> str:
    """Why pending work that waited long does not start."""
    consumers = [
        view.row
        for view in snapshot.workers
        if view.state == "running" and queue.name in view.row.queues
    ]
    if not consumers:
        stale = sum(
            1 for v in snapshot.workers if v.state == "stale" and queue.name in v.row.queues
        )
        return "no live worker" + (f" ({stale} stale)" if stale else "")
    cap = queue.max_concurrent
    if cap is not None and queue.running + queue.claimed >= cap:
        return f"max_concurrent {cap} full"
    # As explain's workers_busy: a consumer is full when its running bodies fill it.
    if all(w.running_jobs >= w.concurrency for w in consumers):
        used = sum(w.running_jobs for w in consumers)
        return f"workers full ({used}/{sum(w.concurrency for w in consumers)})"
    return PER_JOB


def pause_text(pause: QueuePause | None, now: datetime) -> str:
    """``paused 5m by ops@host-1: deploy``: how long ago, who and why, as far as known."""
    if pause is None:
        return "paused"
    text = f"paused {output.age(pause.paused_at, now) or '-'}"
    if pause.paused_by:
        text += f" by {pause.paused_by}"
    return text + (f": {pause.reason}" if pause.reason else "")
