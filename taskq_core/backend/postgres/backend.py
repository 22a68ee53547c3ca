"""PostgresBackend: the Backend protocol over asyncpg, one named query per operation.

The class is its parts, one module per concern over ``core.BackendCore`` (pools, queries,
schema, notifier): ``enqueue`` (statement and COPY), ``dispatch`` (claims, leases, start
marks), ``settle`` (every outcome of a claimed attempt), ``leader`` (election and sweeps),
``admin`` (reads and operator writes), ``retention`` (the prune to the archive, archive
expiry, archived reads), ``schedules`` (cron schedules and the leader's fire) and ``ratelimit``
(limiter state, reservation slots), ``batches`` (batch rows, the outcome hook, the batch
sweeps), ``fleet`` (the fleet metrics' read), ``workflows`` (workflow rows, steps, the
release). Records become protocol rows in ``rows``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from taskq_core.backend.protocol import check_protocol_version

from .admin import AdminPart
from .batches import BatchPart
from .dispatch import DispatchPart
from .enqueue import EnqueuePart
from .errors import translate_errors
from .fleet import FleetPart
from .leader import LeaderPart
from .progress import ProgressPart
from .ratelimit import RateLimitPart
from .registry import RegistryPart
from .retention import RetentionPart
from .schedules import SchedulePart
from .settle import SettlePart
from .workflows import WorkflowPart

if TYPE_CHECKING:
    from taskq_core.backend.protocol import Backend

_IMPLEMENTED_PROTOCOL_VERSION = 4
check_protocol_version("PostgresBackend", _IMPLEMENTED_PROTOCOL_VERSION)


# The same parts, in the same order, as InMemoryBackend's on purpose: one per protocol area in
# each backend, so the two read alike.
@translate_errors
class PostgresBackend(
    WorkflowPart,
    BatchPart,
    EnqueuePart,
    DispatchPart,
    LeaderPart,
    SettlePart,
    AdminPart,
    RegistryPart,
    RetentionPart,
    SchedulePart,
    RateLimitPart,
    FleetPart,
    ProgressPart,
):
    """The Backend protocol on PostgreSQL. Build one with ``await PostgresBackend.connect()``.

    Every public coroutine raises TaskQ's errors for database trouble, never asyncpg's
    (``errors.translate_errors``): DatabaseUnavailableError, TransientDatabaseError,
    SchemaNotMigratedError.
    """

    BACKEND_PROTOCOL_VERSION: ClassVar[int] = _IMPLEMENTED_PROTOCOL_VERSION
    supports_transactional_simulation: ClassVar[bool] = False


if TYPE_CHECKING:

    def _satisfies_protocol(backend: PostgresBackend) -> Backend:
        return backend  # mypy checks every signature against the protocol here
