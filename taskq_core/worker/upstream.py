"""Workflow steps' dependencies (``ctx.upstream``), read once per claimed batch.

A step's body starts after its dependencies' outcomes were read. The producer starts one
``get_upstreams`` read for the steps among the jobs it just claimed, as it queues them; each
step's consumer awaits that read before its body (it has usually finished by then), so a
batch of steps costs one query, not one per step. When the batch's read failed, the step
reads its own (``get_upstream``), whose failure fails the attempt.

A step whose actor takes no context cannot see ``ctx.upstream``: its dependencies are not
read at all (a fan-out's thousands of no-context steps paid a quarter of their extra worker
time for reads nobody used).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from uuid import UUID

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY, Upstream
from taskq_core.worker.active import ActiveJob

UpstreamRead = asyncio.Future[dict[UUID, dict[str, Upstream]]]


def reads_upstream(ref: ActorRef | None, job: JobRow) -> bool:
    """Whether ``job`` is a workflow step whose body can read ``ctx.upstream``: its actor
    (``ref``, None when unknown here) takes a context."""
    return WORKFLOW_ID_KEY in job.metadata and ref is not None and ref.context_param is not None


def prefetch_upstreams(
    backend: Backend, holdings: Sequence[ActiveJob], registry: Mapping[str, ActorRef]
) -> None:
    """Start one read of the dependencies of the steps among ``holdings`` that can read them."""
    steps = [held for held in holdings if reads_upstream(registry.get(held.job.actor), held.job)]
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
