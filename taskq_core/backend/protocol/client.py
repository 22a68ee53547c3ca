"""What a JobsClient needs of a backend: enqueue (also in the caller's transaction), reads of one
job and its history, and the single-job operator writes (cancel, retry).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from taskq_core import jsontext
from taskq_core.backend.protocol.values import (
    ActorConfigRow,
    AttemptRow,
    CancelOutcome,
    EnqueueArgs,
    EventRow,
    JobFilter,
    JobRow,
)


@runtime_checkable
class ClientBackend(Protocol):
    """Enqueue and single-job operations. All times come from the backend's clock."""

    async def close(self) -> None:
        """Release connections; idempotent."""

    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        """Insert one job and NOTIFY the wake channel when it is pending. No event is written:
        creation is not a transition.

        ``delay`` > 0 makes it scheduled. ``max_attempts`` < 1 or an unknown ``retry_kind``
        raise ValueError. Idempotent on ``job_id``: when a job with that id exists and is the
        same job (``is_same_job``), nothing is inserted or notified and the stored row is
        returned, so a retry of an enqueue whose answer was lost cannot create the job twice;
        an id that belongs to another job raises ValueError. With ``connection`` (PG: any asyncpg
        connection, TaskQ's own from ``transaction()`` or the caller's, whatever its codecs;
        memory: a handle from ``transaction()``), the insert commits or rolls back with the
        caller, and so does its NOTIFY. A payload whose JSON text is over the backend's
        ``max_payload_bytes`` (TASKQ_MAX_PAYLOAD_BYTES, given when it was built) raises
        PayloadTooLargeError, naming both sizes, and inserts nothing (``sizes``); so do the
        batch enqueues for any item, a batch's finalizer and a cron schedule's payload.
        """

    async def enqueue_batch(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> list[JobRow]:
        """Insert all jobs atomically (PG: one COPY in one transaction), one row per item in
        order; one NOTIFY. A bad item inserts nothing."""

    async def enqueue_batch_fast(
        self, args_list: Sequence[EnqueueArgs], *, connection: Any = None
    ) -> int:
        """Bulk insert (PG: COPY) returning the count; no rows returned; one NOTIFY."""

    async def replace_waiting_job(
        self, job_id: UUID, args: EnqueueArgs, *, connection: Any = None
    ) -> JobRow | None:
        """Debounce: the job ``job_id``, while it waits (pending or scheduled), takes the
        payload and the start (``delay`` / ``run_at``, on the backend's clock) of ``args``
        and comes back; one ``replaced`` event names the statuses. None when it does not
        wait (running, ended, gone): nothing changes. Atomic against a concurrent claim (a
        job claimed meanwhile is not waiting any more). Pending after it: a wake-up."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A caller-owned transaction whose handle can be passed as ``connection=``."""

    async def get(self, job_id: UUID) -> JobRow | None:
        """One job, or None."""

    async def list_jobs(self, filter: JobFilter) -> list[JobRow]:
        """Jobs matching the filter, newest first."""

    async def get_attempts(self, job_id: UUID) -> list[AttemptRow]:
        """Every attempt of a job, oldest first."""

    async def get_events(self, job_id: UUID) -> list[EventRow]:
        """Every event of a job, oldest first (by ``occurred_at``: an attempt's claim may be
        written when the attempt ends, with a later id than the events of its run)."""

    async def poll_reclaim_events(
        self, after_id: int, limit: int = 100, *, visibility_delay: timedelta | None = None
    ) -> list[EventRow]:
        """Reclaim events with id > after_id older than the visibility delay, by id."""

    async def get_latest_reclaim_event_id(self) -> int:
        """The id of the newest reclaim event, visible or not yet past the visibility delay
        (0 when there is none): where a reclaim feed that starts "from now" begins."""

    async def write_cancel_request(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """pending/scheduled -> cancelled at once; running -> cancel_phase 1 + NOTIFY.

        Outcomes: ``cancelled``, ``requested``, ``already_requested`` (running, a request is
        in flight), ``terminal``, ``not_found``. Both writes record a ``cancel_request`` event
        and set cancel_requested_at and cancel_reason. PG: the events-channel NOTIFY carries
        ``{"type": "cancel", "job_id": ..., "worker_id": ...}``.
        """

    async def retry_job(self, job_id: UUID) -> bool:
        """failed/crashed/cancelled -> pending (attempt budget restarts); False otherwise.

        attempt 0, scheduled_at now(), result, errors, lock and cancel fields cleared; a
        state_change event (detail reason='operator_retry') and a wake.
        """

    async def count_pending_jobs(self, actors: Sequence[str]) -> dict[str, int]:
        """Pending + scheduled jobs per actor (for max_pending back-pressure); actors with
        none are left out."""

    async def get_actor_max_pending(self) -> dict[str, int | None]:
        """Stored max_pending per actor that has an actor_config row."""

    async def get_actor_config(self, actor: str) -> ActorConfigRow | None:
        """One actor_config row."""


def is_same_job(existing: JobRow, args: EnqueueArgs) -> bool:
    """Whether the stored job ``existing`` is what ``args`` would insert under its id: the
    same actor, queue and payload (as jsonb stores it). A retried enqueue sends the very same
    args; anything else reusing the id is another job, which an enqueue refuses."""
    if (existing.actor, existing.queue) != (args.actor, args.queue):
        return False
    stored_payload: Any = json.loads(jsontext.encode(args.payload))
    return bool(existing.payload == stored_payload)


def duplicate_id_error(job_id: UUID) -> ValueError:
    """The error for a job id that belongs to another job."""
    return ValueError(f"a job with id {job_id} already exists (another actor, queue or payload)")
