"""Job progress in memory: the fenced write of a running job's latest report."""

from __future__ import annotations

from typing import Any

from taskq_core.backend.protocol import Lease

from .jsonb import as_json
from .store import MemoryStore


class ProgressPart(MemoryStore):
    """Write a running job's progress."""

    async def write_progress(self, lease: Lease, seq: int, state: dict[str, Any]) -> bool:
        job = self._leased(lease)
        if job is None or seq <= job.progress_seq:
            return False
        job.progress_state = as_json(state)
        job.progress_seq = seq
        job.updated_at = self._now()
        return True
