"""InMemoryBackend: the Backend protocol over plain dicts, for fast worker and client tests.

It implements what the protocol says a caller observes, not how PostgreSQL gets there: every
time predicate reads the injected Clock, rows are mutable records handed out as frozen
snapshots, JSON columns round-trip as jsonb would, and ``transaction()`` simulates a
caller-owned transaction by buffering its writes until the block exits cleanly.

The class is its parts, one module per concern over ``store.MemoryStore`` (the tables and the
writes they share), mirroring ``backend/postgres``: ``enqueue``, ``dispatch`` (claims, leases,
start marks, the dispatch order), ``settle`` (every outcome of a claimed attempt, one path),
``leader`` (election and sweeps), ``reads`` (jobs, history, dashboard), ``admin`` (operator
writes, workers, actor configs, queues), ``notify`` (wake-ups), ``retention`` (prune,
archive expiry, archived reads) and ``schedules`` (cron schedules and the leader's fire). A
new subsystem gets a module and a part of its own here: ``ratelimit`` (rate limits,
reservations), ``batches``, ``fleet`` (the fleet metrics' read).

Each member repeats the protocol's signature word for word on purpose (mypy checks the match)
and carries no docstring: the contract is ``backend/protocol``'s; a comment says only what
this backend does its own way. Logic both backends share is in ``backend/protocol``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from taskq_core.backend.protocol import check_protocol_version

from .admin import AdminPart
from .batches import BatchPart
from .dispatch import DispatchPart
from .enqueue import EnqueuePart
from .fleet import FleetPart
from .leader import LeaderPart
from .notify import NotifyPart
from .progress import ProgressPart
from .ratelimit import RateLimitPart
from .reads import ReadsPart
from .retention import RetentionPart
from .schedules import SchedulePart
from .settle import SettlePart
from .store import MemoryTransaction
from .workflows import WorkflowPart

if TYPE_CHECKING:
    from taskq_core.backend.protocol import Backend

_IMPLEMENTED_PROTOCOL_VERSION = 4
check_protocol_version("InMemoryBackend", _IMPLEMENTED_PROTOCOL_VERSION)


# The same parts, in the same order, as PostgresBackend's on purpose (see the docstring).
class InMemoryBackend(
    WorkflowPart,
    BatchPart,
    EnqueuePart,
    DispatchPart,
    LeaderPart,
    SettlePart,
    ReadsPart,
    AdminPart,
    NotifyPart,
    RetentionPart,
    SchedulePart,
    RateLimitPart,
    FleetPart,
    ProgressPart,
):
    """The Backend protocol held in Python dicts, with an injectable clock (tests only).

    ``InMemoryBackend(clock=FakeClock())`` moves time only when the test does.
    """

    BACKEND_PROTOCOL_VERSION: ClassVar[int] = _IMPLEMENTED_PROTOCOL_VERSION
    supports_transactional_simulation: ClassVar[bool] = True


if TYPE_CHECKING:

    def _satisfies_protocol(backend: InMemoryBackend) -> Backend:
        return backend  # mypy checks every signature against the protocol here


__all__ = ["InMemoryBackend", "MemoryTransaction"]
