"""Completer: successful outcomes written in batches, one statement per flush.

Consumers hand a success to the completer and move on to their next job at once; a single
flusher writes everything waiting in one ``mark_succeeded_many`` statement (attempts and
events included). While one flush is in flight the next batch accumulates, so batches grow
with load and a lone completion is written immediately.

Crash semantics: a job is reported ``succeeded`` only once its flush has committed. If the
worker dies between the actor's return and that commit (at most one flush, a few
milliseconds), the row is still ``running``: its lease expires, the leader reclaims it and
it runs again under its retry policy. At-least-once, as every queue: nothing is lost, and a
job can run twice only around a crash.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskq_core.backend.protocol import Backend, Success
from taskq_core.worker.transient import TRANSIENT_ERRORS

RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class FlushResult:
    """What one flush wrote."""

    submitted: int
    written: int


class Completer:
    """Buffers successes and flushes them; ``close`` writes whatever is left."""

    def __init__(
        self,
        backend: Backend,
        worker_id: Any,
        log: Any,
        *,
        max_batch: int,
        on_flushed: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.on_flushed = on_flushed
        self.worker_id = worker_id
        self.log = log
        self.max_batch = max_batch
        self._pending: deque[Success] = deque()
        self._ready = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background flusher."""
        self._flusher = asyncio.create_task(self._run(), name="completer")

    def submit(self, success: Success) -> None:
        """Queue one success; it is written by the next flush."""
        self._pending.append(success)
        self._ready.set()

    @property
    def backlog(self) -> int:
        """Successes not written yet."""
        return len(self._pending)

    async def _run(self) -> None:
        while not self._closing:
            await self._ready.wait()
            self._ready.clear()
            while self._pending:
                await self.flush_once()
                if self.on_flushed is not None:
                    self.on_flushed()  # finished rows no longer count against caps

    async def flush_once(self) -> FlushResult:
        """Write up to ``max_batch`` waiting successes (retrying transient errors)."""
        batch = [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]
        if not batch:
            return FlushResult(0, 0)
        for delay in (*RETRY_DELAYS, None):
            try:
                written = await asyncio.shield(
                    self.backend.mark_succeeded_many(self.worker_id, batch)
                )
                lost = len(batch) - len(written)
                if lost:
                    self.log.warning("completions_not_owned", count=lost)
                return FlushResult(len(batch), len(written))
            except TRANSIENT_ERRORS as exc:
                if delay is None:
                    break
                self.log.warning("completion_flush_retry", error=repr(exc), size=len(batch))
                await asyncio.sleep(delay)
            except Exception as exc:
                self.log.error("completion_flush_failed", error=repr(exc), size=len(batch))
                return await self._one_by_one(batch)
        self.log.error(
            "completion_flush_gave_up",
            size=len(batch),
            note="those jobs stay running; the leader reclaims them when their leases expire",
        )
        return FlushResult(len(batch), 0)

    async def _one_by_one(self, batch: list[Success]) -> FlushResult:
        """Isolate a poisonous item: write each success on its own."""
        written = 0
        for success in batch:
            try:
                if await self.backend.mark_succeeded(
                    success.job_id,
                    self.worker_id,
                    success.result,
                    fallback_result_ttl=success.fallback_result_ttl,
                ):
                    written += 1
            except Exception as exc:
                self.log.error(
                    "completion_write_failed", job_id=str(success.job_id), error=repr(exc)
                )
        return FlushResult(len(batch), written)

    async def close(self) -> None:
        """Stop the flusher and write everything still waiting."""
        self._closing = True
        self._ready.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        while self._pending:
            await self.flush_once()
