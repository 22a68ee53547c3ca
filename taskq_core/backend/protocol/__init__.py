"""The Backend protocol: the one seam between TaskQ and its storage, in parts.

Worker, client, CLI and TUI talk only to this protocol. ``ClientBackend`` is what JobsClient
needs (``client``), ``WorkerBackend`` what the worker's loops need (``worker``),
``LeaderBackend`` the leader's election and sweeps (``leader``), ``AdminBackend`` the
operator's reads and bulk writes (``admin``), ``RetentionBackend`` the prune and archive
(``retention``), ``RateLimitBackend`` limiter state and reservation slots (``ratelimit``),
``BatchBackend`` batch rows, the outcome hook and the batch sweeps (``batches``),
``FleetBackend`` the fleet metrics' queue-level read (``fleet``), ``WorkflowBackend``
workflow rows, steps and the release (``workflows``); ``values`` holds the types
they all speak.
``Backend`` is all of them: PostgresBackend implements it with asyncpg (every time predicate on
the database clock), InMemoryBackend with dicts and an injected Clock, and both pass the
behavioural conformance suite in ``tests/conformance``. The protocol says what a caller can
observe; how a backend finds its rows (indexes, windows) is its own business.

Both implementations repeat each member's signature word for word, on purpose: mypy checks
the structural match against these Protocols, and a signature is all an implementation
repeats. The docstrings (the contracts) live here only; logic both backends compute alike
lives here too (``derived``, and the rules beside each part), called from both.

Bump BACKEND_PROTOCOL_VERSION when an existing member's observable contract changes in a way an
old implementation would silently mishandle; both implementations assert it at import.
History: v2 fences every worker write by its Lease (worker and attempt), tells claimed jobs
(started_at NULL) from started ones, and renews only the leases a heartbeat names. v3 never
gives an attempt number back (every claim has a new one, the lease changes with it) and
counts the retry budget apart (``uncounted_attempts``); a shutdown's interrupt and abandon
send the job back to the queue. v4 refuses a payload over the backend's ``max_payload_bytes``
at every enqueue (PayloadTooLargeError, ``sizes``), and the listings (``search_jobs``,
``list_recent_jobs``, ``list_batch_jobs``) return JobSummary rows: no payload, result or
traceback.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

# Each part's names, re-exported for the callers above the seam; a backend part imports the
# same names from the part's own module, which is why the lists repeat.
from taskq_core.backend.protocol.admin import (
    RECENT_JOBS_MAX,
    AdminBackend,
    BulkCancelResult,
    DashboardStats,
    DispatchPosition,
    QueueActivity,
    QueueRow,
    QueueStatusCount,
    ReadStaleness,
    WorkerRow,
)
from taskq_core.backend.protocol.admin_rules import (
    check_capacity,
    check_dashboard_window,
    check_queue_update,
    check_recent_limit,
)

# The package's re-exports; memory/batches.py and postgres/batches.py import several of the
# same names from protocol.batches, each the ones it uses.
from taskq_core.backend.protocol.batches import (
    BATCH_ABORT_MESSAGE,
    BATCH_ID_KEY,
    FINALIZES_KEY,
    BatchBackend,
    BatchCounts,
    BatchFilter,
    BatchOutcome,
    BatchRow,
    BatchStatus,
    BatchTransition,
    NewBatch,
    batch_id_of,
)
from taskq_core.backend.protocol.client import (
    ClientBackend,
)
from taskq_core.backend.protocol.fleet import (
    ActorFleetStats,
    FleetBackend,
    FleetStats,
    QueueFleetStats,
    StartLatency,
)
from taskq_core.backend.protocol.leader import (
    LeaderBackend,
    LeaderRow,
)
from taskq_core.backend.protocol.progress import ProgressBackend
from taskq_core.backend.protocol.ratelimit import (
    HeldSlot,
    LimitDefinition,
    LimiterStore,
    LimitGrant,
    LimitUsage,
    RateLimitBackend,
)
from taskq_core.backend.protocol.retention import (
    ArchivedJob,
    PrunePolicy,
    PruneResult,
    RetentionBackend,
)
from taskq_core.backend.protocol.schedules import (
    FiredSchedule,
    ScheduleBackend,
    ScheduleExistsError,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleSyncResult,
    ScheduleUpdate,
    schedule_job_key,
)
from taskq_core.backend.protocol.values import (
    UNSET,
    ActorConfigRow,
    AttemptRow,
    CancelOutcome,
    EnqueueArgs,
    ErrorInfo,
    EventRow,
    JobFilter,
    JobRow,
    JobSummary,
    Lease,
    QueueMode,
    RetryAfterOutcome,
    RetryKind,
    SnoozeOutcome,
    from_values,
    start_time,
)
from taskq_core.backend.protocol.worker import (
    ActorConfigDrift,
    ActorConfigSyncResult,
    ActorDeclaration,
    CancelFlag,
    Denied,
    HeartbeatResult,
    LostAttempt,
    ScheduledAnnouncements,
    Start,
    Success,
    WorkerBackend,
    WorkerInfo,
    first_success_per_job,
)
from taskq_core.backend.protocol.workflows import WorkflowBackend

BACKEND_PROTOCOL_VERSION = 4


@runtime_checkable
class Backend(
    ClientBackend,
    WorkerBackend,
    LeaderBackend,
    AdminBackend,
    RetentionBackend,
    ScheduleBackend,
    RateLimitBackend,
    BatchBackend,
    FleetBackend,
    ProgressBackend,
    WorkflowBackend,
    Protocol,
):
    """Everything TaskQ needs of its storage: the parts together."""

    BACKEND_PROTOCOL_VERSION: ClassVar[int]
    supports_transactional_simulation: ClassVar[bool]


def check_protocol_version(implementation: str, declared: int) -> None:
    """Raise at import when an implementation targets another protocol version."""
    if declared != BACKEND_PROTOCOL_VERSION:
        raise RuntimeError(
            f"{implementation} implements Backend protocol v{declared}, "
            f"but taskq_core expects v{BACKEND_PROTOCOL_VERSION}"
        )


__all__ = [
    "BACKEND_PROTOCOL_VERSION",
    "BATCH_ABORT_MESSAGE",
    "BATCH_ID_KEY",
    "FINALIZES_KEY",
    "RECENT_JOBS_MAX",
    "UNSET",
    "ActorConfigDrift",
    "ActorConfigRow",
    "ActorConfigSyncResult",
    "ActorDeclaration",
    "ActorFleetStats",
    "AdminBackend",
    "ArchivedJob",
    "AttemptRow",
    "Backend",
    "BatchBackend",
    "BatchCounts",
    "BatchFilter",
    "BatchOutcome",
    "BatchRow",
    "BatchStatus",
    "BatchTransition",
    "BulkCancelResult",
    "CancelFlag",
    "CancelOutcome",
    "ClientBackend",
    "DashboardStats",
    "Denied",
    "DispatchPosition",
    "EnqueueArgs",
    "ErrorInfo",
    "EventRow",
    "FiredSchedule",
    "FleetBackend",
    "FleetStats",
    "HeartbeatResult",
    "HeldSlot",
    "JobFilter",
    "JobRow",
    "JobSummary",
    "LeaderBackend",
    "LeaderRow",
    "Lease",
    "LimitDefinition",
    "LimitGrant",
    "LimitUsage",
    "LimiterStore",
    "LostAttempt",
    "NewBatch",
    "ProgressBackend",
    "PrunePolicy",
    "PruneResult",
    "QueueActivity",
    "QueueFleetStats",
    "QueueMode",
    "QueueRow",
    "QueueStatusCount",
    "RateLimitBackend",
    "ReadStaleness",
    "RetentionBackend",
    "RetryAfterOutcome",
    "RetryKind",
    "ScheduleBackend",
    "ScheduleExistsError",
    "ScheduleRecord",
    "ScheduleSpec",
    "ScheduleSyncResult",
    "ScheduleUpdate",
    "ScheduledAnnouncements",
    "SnoozeOutcome",
    "Start",
    "StartLatency",
    "Success",
    "WorkerBackend",
    "WorkerInfo",
    "WorkerRow",
    "WorkflowBackend",
    "batch_id_of",
    "check_capacity",
    "check_dashboard_window",
    "check_protocol_version",
    "check_queue_update",
    "check_recent_limit",
    "first_success_per_job",
    "from_values",
    "schedule_job_key",
    "start_time",
]
