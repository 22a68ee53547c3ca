"""The prune policy the TASKQ_PRUNE_* and TASKQ_ARCHIVE_* settings describe, in one place:
the leader's prune and ``taskq prune`` both build theirs here.

Each terminal status has its own retention setting; ``TASKQ_PRUNE_RETENTION_PERIOD`` is the
fallback for every status whose own setting the operator left unset (so setting only the
period moves every terminal job after it), and the per-status defaults apply when neither
is set.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.settings import TaskqSettings
from taskq_core.statemachine import JobStatus

# The setting that holds each terminal status's retention (crashed shares abandoned's).
RETENTION_SETTING: dict[JobStatus, str] = {
    JobStatus.SUCCEEDED: "prune_retention_succeeded",
    JobStatus.FAILED: "prune_retention_failed",
    JobStatus.CANCELLED: "prune_retention_cancelled",
    JobStatus.ABANDONED: "prune_retention_abandoned",
    JobStatus.CRASHED: "prune_retention_abandoned",
}
FALLBACK_SETTING = "prune_retention_period"


def retention_for(settings: TaskqSettings, status: JobStatus) -> timedelta:
    """How long a terminal job of ``status`` stays in ``jobs`` under these settings."""
    own = RETENTION_SETTING[status]
    chosen = settings.model_fields_set
    if own not in chosen and FALLBACK_SETTING in chosen:
        own = FALLBACK_SETTING
    value: timedelta = getattr(settings, own)
    return value


def prune_policy(
    settings: TaskqSettings,
    *,
    statuses: Iterable[JobStatus] | None = None,
    older_than: timedelta | None = None,
    queue: str | None = None,
) -> PrunePolicy:
    """The policy to prune with: every terminal status (or only ``statuses``), each kept for
    its retention setting (or ``older_than`` for all), archived for
    TASKQ_ARCHIVE_RETENTION_PERIOD, TASKQ_PRUNE_BATCH_SIZE jobs per batch."""
    chosen = list(RETENTION_SETTING) if statuses is None else list(dict.fromkeys(statuses))
    retention = {
        status: older_than if older_than is not None else retention_for(settings, status)
        for status in chosen
    }
    return PrunePolicy(
        retention=retention,
        archive_for=settings.archive_retention_period,
        batch_size=settings.prune_batch_size,
        queue=queue,
    )
