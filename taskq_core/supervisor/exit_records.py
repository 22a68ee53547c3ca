"""Each reaped child's end, written into its ``workers`` row.

The supervisor gives every child process the id it registers under (``TASKQ_WORKER_ID``),
so when it reaps one it knows the row: stopped at once, with the exit status or the signal
that ended it (SIGKILL, a crash, its own stale kill, a clean exit alike), instead of a row
that says running until its heartbeat ages into stale. The write never holds up the loop for
long: a pass writes what is pending within ``EXIT_WRITE_TIMEOUT``; what failed (the database
away) is kept, at most ``MAX_PENDING`` of the latest, and tried again at a pass after
``EXIT_WRITE_RETRY``. Either way the dead worker's jobs are reclaimed when their leases
expire, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from taskq_core.clock import Clock
from taskq_core.supervisor.policy import exit_signal
from taskq_core.supervisor.slots import Emit

# (worker id, exit status or None, signal name or None) -> whether the row was there.
ExitWriter = Callable[[UUID, int | None, str | None], Awaitable[bool]]

EXIT_WRITE_TIMEOUT = 2.0
EXIT_WRITE_RETRY = 5.0
MAX_PENDING = 1000


@dataclass(frozen=True, slots=True)
class ChildExit:
    """One reaped child: its label, the id its row has and its exit code (negative: the
    signal that killed it, as ``Popen.returncode`` says)."""

    label: str
    worker_id: UUID
    code: int

    @property
    def status(self) -> tuple[int | None, str | None]:
        """(exit status, signal name): one of the two is set."""
        return (None, exit_signal(self.code)) if self.code < 0 else (self.code, None)


class ExitRecords:
    """The exits reaped and not yet written, and the writes of them."""

    def __init__(self, write: ExitWriter | None, clock: Clock, emit: Emit) -> None:
        self._write = write
        self._clock = clock
        self._emit = emit
        self._pending: list[ChildExit] = []
        self._retry_at: float | None = None  # set while the writes fail

    @property
    def pending(self) -> list[ChildExit]:
        """The exits not written yet, oldest first."""
        return list(self._pending)

    def add(self, label: str, worker_id: UUID | None, code: int) -> None:
        """Note a reaped child's exit (nothing to write without a row id or a writer)."""
        if self._write is None or worker_id is None:
            return
        self._pending.append(ChildExit(label, worker_id, code))
        del self._pending[:-MAX_PENDING]

    def deadlines(self) -> list[float]:
        """When the loop should wake to write again (empty: nothing waits for a retry)."""
        return [self._retry_at] if self._pending and self._retry_at is not None else []

    async def flush(self) -> None:
        """Write the pending exits, oldest first, unless the last failure is too recent."""
        if not self._pending or self._write is None:
            return
        if self._retry_at is not None and self._clock.monotonic() < self._retry_at:
            return
        written = 0
        try:
            async with asyncio.timeout(EXIT_WRITE_TIMEOUT):
                while self._pending:
                    done = self._pending[0]
                    await self._write(done.worker_id, *done.status)
                    self._pending.pop(0)
                    written += 1
        except Exception as exc:
            if self._retry_at is None:  # once per failing streak, not at every retry
                error = str(exc) or type(exc).__name__
                self._emit(
                    "child_exit_unrecorded", "warning", pending=len(self._pending), error=error
                )
            self._retry_at = self._clock.monotonic() + EXIT_WRITE_RETRY
            return
        if self._retry_at is not None:
            self._emit("child_exits_recorded", written=written)
        self._retry_at = None
