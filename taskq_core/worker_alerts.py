"""A stale worker's alert, and an operator acknowledging it.

A worker row that says running but has been silent past the liveness threshold raises an
alert (``liveness.raises_stale_alert``) in ``taskq top`` and the web UI. An operator who has
looked at it acknowledges its silence (``taskq workers ack``, ``a`` in top, the workers page's
button): the alert goes, recorded with who and why, until the worker is heard from again. The
row itself goes with the stale-worker cleanup, and its alert with it; a workgroup child the
supervisor saw die is stopped at once and raises none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from taskq_core.backend.protocol import WorkerRow
from taskq_core.backend.protocol.admin import AdminBackend, Audit
from taskq_core.liveness import silence_acknowledged, worker_state

# acknowledged: written now; already_acknowledged: this silence was, earlier (kept as it is);
# running: heard from lately, nothing to acknowledge; stopped: it raises no alert;
# not_found: no such row (never registered, or deleted by the cleanup).
WorkerAckOutcome = Literal[
    "acknowledged", "already_acknowledged", "running", "stopped", "not_found"
]


@dataclass(frozen=True, slots=True)
class WorkerAck:
    """What acknowledging did, and the worker's row (after an acknowledgement written; None:
    not found)."""

    outcome: WorkerAckOutcome
    worker: WorkerRow | None


def ack_outcome(
    worker: WorkerRow | None, now: datetime, stale_after: timedelta
) -> WorkerAckOutcome:
    """What acknowledging ``worker`` at ``now`` would do."""
    if worker is None:
        return "not_found"
    state = worker_state(worker, now, stale_after)
    if state != "stale":
        return state
    return "already_acknowledged" if silence_acknowledged(worker) else "acknowledged"


async def acknowledge_stale_worker(
    backend: AdminBackend, worker_id: UUID, now: datetime, stale_after: timedelta, audit: Audit
) -> WorkerAck:
    """Acknowledge the silence of a stale worker, judged at ``now`` (its row read now). The
    write is fenced by the silence judged: a worker heard from (or stopped) meanwhile is
    judged again from its new row."""
    for _ in range(2):
        rows = await backend.list_workers()
        worker = next((row for row in rows if row.id == worker_id), None)
        outcome = ack_outcome(worker, now, stale_after)
        if outcome != "acknowledged" or worker is None:
            return WorkerAck(outcome, worker)
        if await backend.mark_worker_acknowledged(worker.id, worker.last_seen_at, audit):
            after = [row for row in await backend.list_workers() if row.id == worker_id]
            return WorkerAck(outcome, after[0] if after else worker)
    return WorkerAck("running", worker)  # its row changed at every try: it is beating
