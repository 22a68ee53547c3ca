"""Workflow steps' dependencies (``ctx.upstream``), read once per claimed batch.

A step's body starts after its dependencies' outcomes were read. The producer starts one
``get_upstreams`` read for the steps among the jobs it just claimed, as it queues them; each
step's consumer awaits that read before its body (it has usually finished by then), so a
batch of steps costs one query, not one per step. When the batch's read failed, the step
reads its own (``get_upstream``), whose failure fails the attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from uuid import UUID

from taskq_core.backend.protocol import Backend
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY, Upstream
from taskq_core.worker.active import ActiveJob

UpstreamRead = asyncio.Future[dict[UUID, dict[str, Upstream]]]


def prefetch_upstreams(backend: Backend, holdings: Sequence[ActiveJob]) -> None:
    """Start one read of the dependencies of the workflow steps among ``holdings``."""
    steps = [held for held in holdings if WORKFLOW_ID_KEY in held.job.metadata]
    if not steps:
        return
    read: UpstreamRead = asyncio.ensure_future(
        backend.get_upstreams([held.job.id for held in steps])
    )
    read.add_done_callback(_retrieved)
    for held in steps:
        held.upstream_read = read


def _retrieved(read: UpstreamRead) -> None:
    """A failed read is answered by each step's own read: never an unretrieved error."""
    if not read.cancelled():
        read.exception()


async def read_upstream(backend: Backend, held: ActiveJob) -> dict[str, Upstream]:
    """``held``'s dependencies by step name: from its batch's read, else its own."""
    read, held.upstream_read = held.upstream_read, None
    if read is not None:
        try:
            # Shielded: a step cancelled while it waits does not cancel its batch's read.
            return (await asyncio.shield(read)).get(held.job.id, {})
        except Exception:  # the batch's read failed: this step reads its own below
            pass
    return await backend.get_upstream(held.job.id)
