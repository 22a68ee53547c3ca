"""The writes the web UI makes for an operator, each recorded with who and why.

Who is ``user@host (web UI)``, the user and host the server runs as (the token names no
person); why is the reason the form or the API body gave, checked by ``check_reason``. A
job's cancel and retry go through the same audited bulk writes as ``taskq cancel`` and
``taskq retry`` (the job's event gains ``by`` and ``why``); a schedule's enable and disable
through ``update_schedule`` (an operator-log row), and its run-now through ``run_schedule``
(the job's metadata names who ran it), as ``taskq schedules enable|disable|run`` do.
"""

from __future__ import annotations

from typing import Protocol
from uuid import UUID

from litestar.exceptions import ValidationException
from pydantic import BaseModel

from taskq_cli.job_cancel import cancel_one
from taskq_cli.operator import operator_id
from taskq_core.backend.protocol import Backend, CancelOutcome, JobFilter, JobRow, ScheduleRecord
from taskq_core.backend.protocol.admin import Audit
from taskq_core.client import JobsClient

# A reason longer than this is refused (it is shown in a table cell and an event).
MAX_REASON = 500
# What a cancel from the web UI stores as the job's cancel reason when none was given.
DEFAULT_CANCEL_REASON = "cancelled from the web UI"


class ReasonForm(BaseModel):
    """The reason field of a page's action form (retry, cancel, pause, disable)."""

    reason: str = ""


def web_ui_operator() -> str:
    """Who the web UI's writes name: ``user@host (web UI)``."""
    return f"{operator_id()} (web UI)"


def check_reason(reason: str | None) -> str | None:
    """The reason stripped (None when empty); 400 for one too long or holding a NUL."""
    reason = (reason or "").strip()
    if "\x00" in reason:
        raise ValidationException("the reason must not contain a NUL character")
    if len(reason) > MAX_REASON:
        raise ValidationException(f"the reason is at most {MAX_REASON} characters")
    return reason or None


class OperatorActions(Protocol):
    """The UI's audited writes (``BackendActions`` over any Backend)."""

    async def cancel_job(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """Cancel a waiting job at once, or ask the worker running it to stop."""

    async def retry_job(self, job_id: UUID, reason: str | None) -> bool:
        """Re-pend a failed, crashed or cancelled job; False when it is none of those (or
        another job holds its unique key)."""

    async def set_schedule_enabled(
        self, name: str, enabled: bool, reason: str | None
    ) -> ScheduleRecord:
        """Enable or disable a schedule (ScheduleNotFoundError for an unknown name)."""

    async def run_schedule(self, name: str, reason: str | None) -> JobRow:
        """Fire a schedule once now: its job (ScheduleNotFoundError for an unknown name)."""


class BackendActions:
    """OperatorActions over a Backend (the one the read model uses)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._client: JobsClient | None = None

    def _audit(self, reason: str | None) -> Audit:
        return Audit(by=web_ui_operator(), reason=reason)

    async def _jobs_client(self) -> JobsClient:
        """A client on the backend, for the schedule writes (opening it connects nothing)."""
        if self._client is None:
            client = JobsClient(backend=self.backend)
            await client.open()
            self._client = client
        return self._client

    async def cancel_job(self, job_id: UUID, reason: str | None) -> CancelOutcome:
        """One job through the audited bulk cancel; the outcome as ``write_cancel_request``
        names it."""
        reason_stored = reason or DEFAULT_CANCEL_REASON
        outcome, _ = await cancel_one(self.backend, job_id, reason_stored, self._audit(reason))
        return outcome

    async def retry_job(self, job_id: UUID, reason: str | None) -> bool:
        """One job through the audited bulk retry."""
        filter = JobFilter(ids=[job_id], limit=None)
        return bool(await self.backend.retry_where(filter, audit=self._audit(reason)))

    async def set_schedule_enabled(
        self, name: str, enabled: bool, reason: str | None
    ) -> ScheduleRecord:
        """``update_schedule(enabled=...)``, logged in the operator log."""
        client = await self._jobs_client()
        return await client.update_schedule(name, enabled=enabled, audit=self._audit(reason))

    async def run_schedule(self, name: str, reason: str | None) -> JobRow:
        """``run_schedule``: one job now, its metadata naming who and why."""
        client = await self._jobs_client()
        return await client.run_schedule(name, audit=self._audit(reason))
