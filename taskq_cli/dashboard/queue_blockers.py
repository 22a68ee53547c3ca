"""What holds back a queue whose oldest pending job is old: the "why" column of the queues
pane in ``taskq top`` and of the web UI's queues page.

Only what is true of the whole queue is said here, from the refresh's own snapshot (no extra
read): paused (how long ago, by whom and why, when the pause left a note), no live worker
consumes it, its ``max_concurrent`` is full, every live consumer is at full concurrency.
These are the queue-wide checks of ``jobs explain``, judged with the same liveness rule;
when none applies the blocker is per job (actor not registered, actor cap, identity key,
fairness turn) and ``e`` on one of its jobs says which.
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
    """A few words on why the queue's pending work waits; empty when nothing waits long
    (a paused queue always says so: nothing of it will run)."""
    if queue.paused:
        return pause_text(snapshot.pauses.get(queue.name), snapshot.now)
    oldest = queue.oldest_pending_at
    if oldest is None or snapshot.now - oldest < OLD_PENDING:
        return ""
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
