"""Batch benchmark: how fast one `taskq worker` drains a batch's children (tagged, with a
finalizer, the hook after every flush) against as many plain jobs, same worker settings.

Both backlogs are the same no-op jobs, loaded in bulk and ANALYZEd before the worker starts.
A plain drain ends when no job waits or runs; a batch drain when its finalizer has ended
(the hook enqueued it after the last child). Each round drains one of each back to back, the
order swapped every round; the share is the median of the rounds' own shares (``paired``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from uuid import UUID

from benchmarks.paired import median_seconds, median_share, rotated, shares
from benchmarks.worker_cpu import CpuUse, median_part
from benchmarks.worker_sections import Drained, timed_drain
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.client import EnqueueItem, JobsClient

CONCURRENCY = 16
FreshBackend = Callable[[], AbstractAsyncContextManager[PostgresBackend]]
Settle = Callable[[PostgresBackend], Awaitable[None]]


@dataclass(frozen=True)
class BatchFigures:
    """Each round's drain seconds of each kind (``True``: the batch), for ``jobs`` jobs, and
    the worker's CPU a job (``worker_cpu``) from its registration to the drain's end."""

    jobs: int
    rounds: tuple[dict[bool, float], ...]
    exit_codes: tuple[int, ...]
    cpu: tuple[dict[bool, CpuUse | None], ...] = ()

    def loop_cpu(self, batch: bool) -> float | None:
        """The median microseconds a job of the worker's event loop thread."""
        return median_part((round_cpu[batch] for round_cpu in self.cpu), "loop")

    @property
    def plain(self) -> float:
        """The median plain drain's seconds."""
        return median_seconds(self.rounds, False)

    @property
    def batch(self) -> float:
        """The median batch drain's seconds."""
        return median_seconds(self.rounds, True)

    @property
    def ratios(self) -> list[float]:
        """Each round's batch drain rate as a fraction of its plain one's."""
        return shares(self.rounds, True, False)

    @property
    def ratio(self) -> float:
        """The median of the rounds' shares."""
        return median_share(self.rounds, True, False)


async def _load(backend: PostgresBackend, jobs: int, *, batch: bool) -> UUID | None:
    """The backlog; the batch's id (None for plain jobs)."""
    async with JobsClient(backend=backend) as client:
        items = [("noop", {"n": n}) for n in range(jobs)]
        if not batch:
            await client.enqueue_many_fast(items)
            return None
        rows = await client.enqueue_batch(items, finalizer=EnqueueItem("noop", {"final": True}))
        return UUID(rows[0].metadata["batch_id"])


async def _finalizer_ended(backend: PostgresBackend, batch_id: UUID) -> bool:
    """Whether the batch's finalizer exists and has ended (two reads by primary key: the
    watch must not cost the drain it times)."""
    row = await backend.get_batch(batch_id)
    if row is None or row.finalizer_job_id is None:
        return False
    job = await backend.get(row.finalizer_job_id)
    return job is not None and job.is_terminal


async def _drain(backend: PostgresBackend, dsn: str, batch_id: UUID | None) -> Drained:
    """Seconds from the worker's start until the backlog is done; the worker's exit code and
    CPU."""
    done = None if batch_id is None else lambda: _finalizer_ended(backend, batch_id)
    return await timed_drain(backend, dsn, CONCURRENCY, done)


async def measure(
    fresh_backend: FreshBackend, settle: Settle, dsn: str, jobs: int, rounds: int
) -> BatchFigures:
    """``rounds`` rounds of one drain of each kind on fresh schemas, back to back, the
    order swapped every round."""
    drains: list[dict[bool, float]] = []
    cpu: list[dict[bool, CpuUse | None]] = []
    codes: list[int] = []
    for number in range(rounds):
        seconds: dict[bool, float] = {}
        spent: dict[bool, CpuUse | None] = {}
        for batch in rotated((False, True), number):
            async with fresh_backend() as backend:
                batch_id = await _load(backend, jobs, batch=batch)
                await settle(backend)
                drained = await _drain(backend, dsn, batch_id)
            seconds[batch] = drained.seconds
            spent[batch] = None if drained.cpu is None else drained.cpu.per_job(jobs)
            codes.append(drained.exit_code)
        drains.append(seconds)
        cpu.append(spent)
    return BatchFigures(jobs, tuple(drains), tuple(codes), tuple(cpu))
