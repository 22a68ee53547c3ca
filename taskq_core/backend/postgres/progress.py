"""Job progress on PostgreSQL: the fenced write of a running job's latest report
(sql/progress.sql)."""

from __future__ import annotations

from typing import Any

from taskq_core.backend.protocol import Lease

from .core import BackendCore


class ProgressPart(BackendCore):
    """Write a running job's progress."""

    async def write_progress(self, lease: Lease, seq: int, state: dict[str, Any]) -> bool:
        written = await self._pool.fetchval(
            self._queries["write_progress"],
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            seq,
            state,
        )
        return written is not None
