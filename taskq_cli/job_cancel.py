"""Cancelling one job for an operator, as ``taskq cancel <id>`` and the web UI's cancel
button do: through the audited bulk write (the job's event records who and why), then the
outcome named as ``write_cancel_request`` names it."""

from __future__ import annotations

from uuid import UUID

from taskq_core.backend.protocol import Backend, CancelOutcome, JobFilter, JobRow
from taskq_core.backend.protocol.admin import Audit
from taskq_core.statemachine import JobStatus


async def cancel_one(
    backend: Backend, job_id: UUID, reason: str | None, audit: Audit
) -> tuple[CancelOutcome, JobRow | None]:
    """Cancel a waiting job at once, or ask the worker running it to stop; what that did
    and the job after it (None, with ``not_found``, when there is no such job)."""
    result = await backend.cancel_where(JobFilter(ids=[job_id], limit=None), reason, audit=audit)
    after = await backend.get(job_id)
    if result.cancelled:
        return "cancelled", after
    if result.requested:
        return "requested", after
    if after is None:
        return "not_found", None
    return ("already_requested" if after.status is JobStatus.RUNNING else "terminal"), after
