"""What the overview warns about, from one dashboard snapshot (no extra read).

- no leader, or a silent one: no sweeps run (scheduled jobs are not promoted, dead
  workers' jobs are not reclaimed);
- a stranded queue: jobs pending and no live worker consumes the queue (the leader's
  stranded-queue check, judged with the same liveness rule as ``taskq top``);
- a stale worker: silent past the threshold, maybe holding jobs until they are reclaimed
  (until an operator acknowledges its silence, or the cleanup deletes its row);
- a paused queue: who paused it, when and why;
- a rate limit or reservation used up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from taskq_cli import output
from taskq_cli.dashboard.queue_blockers import pause_text
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_core.backend.protocol import QueueActivity, WorkerRow

AlertKind = Literal[
    "no_leader", "stale_leader", "stranded_queue", "stale_worker", "paused_queue", "limit_full"
]
Severity = Literal["bad", "warn"]


@dataclass(frozen=True)
class Alert:
    """One thing an operator should look at: its kind, what it is about, in words."""

    kind: AlertKind
    severity: Severity
    subject: str
    message: str


def worker_name(row: WorkerRow) -> str:
    """``label (host:pid)``, or ``host:pid`` for a worker without a label."""
    place = f"{row.hostname}:{row.pid}"
    return f"{row.label} ({place})" if row.label else place


def live_consumers(queue: QueueActivity, snapshot: Snapshot) -> list[WorkerRow]:
    """The running workers that consume ``queue``."""
    return [v.row for v in snapshot.workers if v.state == "running" and queue.name in v.row.queues]


def alerts(snapshot: Snapshot) -> list[Alert]:
    """Everything worth a look, worst first."""
    found: list[Alert] = []
    leader = snapshot.leader
    if leader is None:
        found.append(
            Alert(
                "no_leader",
                "warn",
                "leader",
                "no worker leads: scheduled jobs are not promoted and dead workers' jobs "
                "are not reclaimed until one does",
            )
        )
    elif leader.state != "running":
        found.append(
            Alert(
                "stale_leader",
                "bad",
                worker_name(leader.row),
                f"the leader is {leader.state} (last seen "
                f"{output.age(leader.row.last_seen_at, snapshot.now)} ago): sweeps stop until "
                "another worker takes over",
            )
        )
    for queue in snapshot.queues:
        if queue.pending and not queue.paused and not live_consumers(queue, snapshot):
            found.append(
                Alert(
                    "stranded_queue",
                    "bad",
                    queue.name,
                    f"{queue.pending:,} pending and no live worker consumes this queue",
                )
            )
    threshold = output.age(snapshot.now - snapshot.stale_after, snapshot.now)
    for view in snapshot.workers:
        if view.state == "stale" and not view.acknowledged:
            held = view.row.running_jobs + view.row.claimed_jobs
            fate = (
                f"; its {held} jobs are reclaimed when their leases expire"
                if held
                else "; it holds no jobs"
            )
            silent = output.age(view.row.last_seen_at, snapshot.now)
            found.append(
                Alert(
                    "stale_worker",
                    "warn",
                    worker_name(view.row),
                    f"silent for {silent} (stale after {threshold}){fate}",
                )
            )
    for queue in snapshot.queues:
        if queue.paused:
            text = pause_text(snapshot.pauses.get(queue.name), snapshot.now)
            found.append(Alert("paused_queue", "warn", queue.name, text))
    full = sorted({u.limit.name for u in snapshot.limits if u.share is not None and u.share >= 1.0})
    for name in full:
        found.append(Alert("limit_full", "warn", name, "used up: jobs that need it wait"))
    return sorted(found, key=lambda alert: alert.severity != "bad")
