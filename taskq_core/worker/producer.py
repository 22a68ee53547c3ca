"""ProducerLoop: claims due jobs into the bounded local queue, woken by NOTIFY or a poll.

Capacity is max_concurrency plus the prefetch (``pace.BodyPace``: TASKQ_PREFETCH, or what
the consumers will start within the next 50 ms): consumers find their next job already
claimed instead of waiting for a round trip. The producer claims at most the free capacity,
so the local queue never blocks, and it waits until a quarter of the capacity is free (or
the local queue ran dry) before claiming again, so claims come in batches, not one per job.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from taskq_core.backend.protocol import JobRow
from taskq_core.obs.metrics import labels, queue_attributes, worker_attributes
from taskq_core.obs.spans import DispatchSpan, tracing_installed
from taskq_core.worker.active import ActiveJob
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.transient import (
    TRANSIENT_ERRORS,
    Backoff,
    UnexpectedErrorGuard,
    retry_pause,
)
from taskq_core.worker.upstream import prefetch_upstreams
from taskq_core.worker.waits import wait_any


@dataclass(frozen=True)
class ProducerTick:
    """What one producer pass did."""

    requested: int
    claimed: int


class ProducerLoop:
    """Dispatch into the local queue until the producer is told to stop."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        settings = deps.settings
        self.poll_interval = (
            settings.notify_poll_interval if settings.notify_enabled else settings.poll_interval
        )
        self._guard = UnexpectedErrorGuard("producer", deps.log, meters=deps.meters)
        self._backoff = Backoff()

    async def run_once(self) -> ProducerTick:
        """Claim up to the free capacity; return how many were asked for and claimed."""
        deps = self.deps
        settings = deps.settings
        consumers = settings.max_concurrency
        prefetch = deps.active.pace.prefetch(
            consumers, settings.prefetch, settings.effective_prefetch
        )
        capacity = consumers + prefetch
        free = capacity - deps.in_flight()
        if free <= 0 or not deps.queues:
            return ProducerTick(0, 0)
        if free < max(1, capacity // 4) and not deps.local_queue.empty():
            return ProducerTick(0, 0)  # enough work queued locally: wait for a bigger batch
        if deps.completer.backlog >= deps.completer.backlog_limit:
            return ProducerTick(0, 0)  # successes wait to be written: claim no more until then
        deps.state.telemetry = deps.settings.otel_enabled and tracing_installed()
        span = DispatchSpan(deps.labels, deps.queues, free) if deps.state.telemetry else None
        started = deps.clock.monotonic()
        try:
            jobs = await deps.backend.dispatch_batch(
                deps.worker_id, deps.queues, free, deps.settings.lock_lease_delta
            )
        except Exception as exc:
            if span is not None:
                span.finish(0, exc)
            raise
        dispatch = None if span is None else span.finish(len(jobs))
        self._record(deps.clock.monotonic() - started, jobs)
        claimed = []
        for job in jobs:
            held, stale = deps.active.claim(job, started, dispatch)
            if stale is not None:
                # Claimed again while an earlier holding of it is still here (it was
                # reclaimed meanwhile): that one must never write for the new attempt.
                self._supersede(stale)
            claimed.append(held)
        prefetch_upstreams(deps.backend, claimed, deps.registry)  # one read for the steps
        for held in claimed:
            deps.local_queue.put_nowait(held)
        return ProducerTick(free, len(jobs))

    def _record(self, seconds: float, jobs: list[JobRow]) -> None:
        """The dispatch's duration, and the jobs it claimed per queue."""
        meters, group = self.deps.meters, self.deps.settings.worker_group
        meters.dispatch_duration.record(seconds, worker_attributes(group))
        if not jobs:
            return
        queue = jobs[0].queue
        if all(job.queue == queue for job in jobs):  # the usual claim: one queue
            meters.dispatched_jobs.add(len(jobs), queue_attributes(queue, group))
            return
        for name, count in Counter(job.queue for job in jobs).items():
            meters.dispatched_jobs.add(count, queue_attributes(name, group))

    def _supersede(self, stale: ActiveJob) -> None:
        """Stop a superseded holding: nothing is written for it any more."""
        stale.lost = stale.lost or "claimed_again"
        if stale.task is not None:
            stale.cancel_reason = "lease_lost"
            stale.task.cancel()
        self.deps.log.warning("job_claimed_again", job_id=str(stale.job.id))
        self.deps.meters.leases_lost.add(1, labels(**{"taskq.lease.reason": "claimed_again"}))

    async def run(self) -> None:
        """Loop: claim, then wait for a wake-up (NOTIFY, freed slot, poll timeout, stop)."""
        deps = self.deps
        try:
            await self._loop()
        finally:
            deps.liveness.forget("producer")

    async def _loop(self) -> None:
        deps = self.deps
        async with deps.backend.subscribe_wake() as wake:
            while not deps.state.producer_stop.is_set():
                deps.liveness.tick("producer", period=self.poll_interval)
                wake.clear()
                deps.active.slot_freed.clear()
                full_batch = False
                try:
                    tick = await self.run_once()
                    full_batch = tick.requested > 0 and tick.claimed == tick.requested
                    if tick.requested:
                        deps.database.succeeded()
                    self._backoff.reset()
                    self._guard.succeeded()
                except TRANSIENT_ERRORS as exc:
                    deps.database.failed("producer", exc)
                    await retry_pause(deps.database, self._backoff.next(), deps.state.producer_stop)
                    continue
                except Exception as exc:
                    self._guard.failed(exc)
                if full_batch:
                    await asyncio.sleep(0)  # more work is likely waiting: go again at once
                    continue
                await wait_any(
                    wake,
                    deps.active.slot_freed,
                    deps.state.producer_stop,
                    timeout=self.poll_interval,
                )
