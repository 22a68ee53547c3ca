"""What the maintenance leader needs of a backend: election and the sweeps. Sweeps take no ``now``
argument: the backend's clock decides every time predicate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable
from uuid import UUID

from taskq_core.constants import DEFAULT_POISON_RECLAIMS


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """The ``maintenance_leader`` row."""

    worker_id: UUID
    elected_at: datetime
    last_seen_at: datetime


# Both backends restate these signatures on purpose (the package docstring says why); the
# contracts are written here only.
@runtime_checkable
class LeaderBackend(Protocol):
    """Leader election and the maintenance sweeps it runs."""

    async def try_acquire_leadership(
        self, worker_id: UUID, *, lease: timedelta | None = None
    ) -> bool:
        """Try to become (or stay) the maintenance leader; True while leading. The leader row
        is upserted on success.

        A leader keeps its leadership by calling again within ``lease`` of its last call:
        once a whole ``lease`` has passed without one, another worker asking wins it, and the
        old leader's next call returns False (or True when nobody took it meanwhile). None:
        no lease, held until released (or, PG, until its connection ends).

        The call returns only once the database answered; when it cannot be reached it
        raises DatabaseUnavailableError, so False always means another worker leads.
        PG: a session advisory lock on a dedicated connection whose ``idle_session_timeout``
        is the lease, so the server ends a silent leader's session and frees its lock; a
        leader whose connection was lost competes again at once on a new one. A server that
        refuses the setting (PostgreSQL < 14) is logged once (``leader_lease_unenforced``)
        and the lock lasts as long as the session. A PG backend has one lock connection:
        within it, leadership belongs to the worker id that took it, and another worker id
        asking gets False until it is released (workers each have their own backend).
        """

    async def release_leadership(self, worker_id: UUID) -> None:
        """Give up leadership (no-op when not leading)."""

    async def get_leader(self) -> LeaderRow | None:
        """The current leader row, if any."""

    async def get_next_due_in(self) -> float | None:
        """Seconds until the earliest scheduled job is due (0 when one is due already), on
        the backend's clock; None when no job waits for a time."""

    async def promote_scheduled_jobs(self) -> int:
        """Due scheduled jobs -> pending (scheduled_at kept as the FIFO key); NOTIFY when any
        moved."""

    async def fail_overdue_jobs(self) -> int:
        """pending/scheduled jobs past schedule_to_close -> failed (DeadlineExceeded), no
        attempt row."""

    async def reclaim_expired_leases(
        self,
        cancel_grace: timedelta,
        cleanup_grace: timedelta,
        *,
        poison_reclaims: int | None = DEFAULT_POISON_RECLAIMS,
    ) -> int:
        """Running jobs whose lease expired (plus the cancel graces + 60s when a cancel is in
        flight), each with a 'reclaim' event (detail: from_state, to_state, reason
        'lock_expired', worker_id, started) in the same transaction:

        - a requested cancel -> cancelled (it wins over any retry);
        - never started (claimed only) -> pending in its place, its attempt given back, no
          attempt row, and ``unstarted_reclaims`` one more (the next claim returns it on the
          JobRow; a worker then records the start before the body runs, so the job's next
          crash counts); once that count reached UNSTARTED_RECLAIM_LIMIT it counts as
          started, so a job that kills its worker before its start is written cannot loop
          forever;
        - its start recorded, and this is the ``poison_reclaims``-th such reclaim of the job
          (what counts: ``backend.protocol.poison``; None or 0: never) -> failed as a poison
          job: error_class POISON_JOB_ERROR, a message naming how many
          workers died running it, a crashed attempt (WorkerCrashed), and the event's detail
          gains ``poison`` true and ``crashes`` (that count). Retries left do not matter;
        - started, retries left -> pending at now(), else crashed; a crashed attempt. A job
          that counts as started only by UNSTARTED_RECLAIM_LIMIT has ``start_assumed`` true
          in its event's detail.

        Retries left: transient with attempt < max_attempts, or indefinite with
        schedule_to_close unset or not passed; non_retryable never. Error class WorkerCrashed.
        One wake when anything was reclaimed.
        """

    async def expire_results(
        self, batch_size: int = 10_000, *, on_batch: Callable[[int], None] | None = None
    ) -> int:
        """Clear results (and result_expires_at) whose result_expires_at has passed,
        ``batch_size`` jobs per committed batch (PG: walking jobs_result_expiry_idx), until a
        batch clears fewer; returns how many were cleared. ``on_batch`` is called after each
        committed batch with the results it cleared."""

    async def delete_stale_workers(self, older_than: timedelta, batch_size: int = 1_000) -> int:
        """Delete ``workers`` rows not heard from for ``older_than`` (``last_seen_at`` older
        than now - older_than, whether they stopped cleanly or vanished), except a row that
        still holds a running job (it goes once the reclaim has taken back that job). Bounded:
        ``batch_size`` rows per committed batch; returns how many were deleted."""

    async def vacuum_jobs(self, min_dead: int, dead_fraction: float) -> bool:
        """Vacuum the jobs table now (index cleanup on) when it holds at least ``min_dead``
        dead row versions and at least ``dead_fraction`` of its rows are dead, unless a
        vacuum of it is already running; True when it vacuumed. Every claim leaves a dead
        entry at the head of the dispatch index that each dispatch walks until a vacuum
        removes it, and autovacuum looks only once per naptime (a minute by default). PG: a
        role that does not own the table gets a warning from the server and nothing happens.
        Memory: nothing piles up, never vacuums."""

    async def list_waiting_queues(self) -> list[str]:
        """Sorted names of the queues that hold at least one pending job. PG walks the
        pending dispatch index one queue at a time (a skip scan), so the cost follows the
        number of queues, not of jobs. Scheduled jobs count once they come due."""
