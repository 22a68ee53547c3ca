"""Jobs in known states for the UI tests, written through the Backend protocol (the way a
client and a worker would), plus the database's own count of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg

from taskq_core.backend.protocol import Backend, ErrorInfo, JobRow
from taskq_core.statemachine import JobStatus
from tests.conformance.states import args, reload, running_job
from tests.conftest import PgTarget

TRACEBACK = """Traceback (most recent call last):
  File "app/media.py", line 42, in resize
    image = await fetch(payload.url)
ConnectionResetError: upstream closed the connection
"""
# A priority above any a test gives its waiting jobs.
_FIRST = 1_000
ERROR = ErrorInfo("ConnectionResetError", "upstream closed the connection", TRACEBACK)


async def job_in(
    backend: Backend, status: JobStatus, *, queue: str = "default", **fields: Any
) -> JobRow:
    """A job of ``queue`` in ``status``: enqueued, or claimed and settled by a made-up
    worker, as a real one would. Supported: pending, scheduled, running, succeeded, failed,
    cancelled."""
    if status is JobStatus.PENDING:
        return await backend.enqueue(args(queue=queue, **fields))
    if status is JobStatus.SCHEDULED:
        return await backend.enqueue(args(queue=queue, delay=timedelta(hours=1), **fields))
    if status is JobStatus.CANCELLED:
        job = await backend.enqueue(args(queue=queue, **fields))
        assert await backend.write_cancel_request(job.id, "test") == "cancelled"
        return await reload(backend, job.id)
    fields.setdefault("retry_kind", "non_retryable")  # one failure fails it for good
    # Ahead of the queue's waiting jobs, so the made-up worker claims this one.
    fields.setdefault("priority", _FIRST)
    job, _ = await running_job(backend, queue=queue, **fields)
    if status is JobStatus.SUCCEEDED:
        assert await backend.mark_succeeded(job.lease(), {"ok": True})
    elif status is JobStatus.FAILED:
        assert await backend.mark_failed_or_retry(job.lease(), ERROR, None) is not None
    elif status is not JobStatus.RUNNING:
        raise ValueError(f"job_in does not make {status.value} jobs")
    row = await reload(backend, job.id)
    assert row.status is status, row.status
    return row


async def status_counts(target: PgTarget) -> dict[str, int]:
    """How many jobs of each status the schema's ``jobs`` table holds, counted directly."""
    conn = await asyncpg.connect(target.dsn)
    try:
        rows = await conn.fetch(
            f"SELECT status::text, count(*) FROM {target.schema}.jobs GROUP BY status"
        )
    finally:
        await conn.close()
    return {row["status"]: row["count"] for row in rows}
