"""Helpers for the scheduled-sweep tests: deps on a FakeClock, terminal jobs of any status
on the memory backend, and waiting on a state with a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.clock import FakeClock
from taskq_core.statemachine import JobStatus
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.runtime import Worker
from tests.conformance.conftest import Harness
from tests.conformance.states import job_in
from tests.worker.conftest import fast_settings

MIDNIGHT = datetime(2026, 1, 1, tzinfo=UTC)
TERMINAL = (
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.CRASHED,
    JobStatus.ABANDONED,
)


def lead(deps: WorkerDeps) -> None:
    """Make ``deps`` the leader as a won campaign does: its lease renewed now."""
    deps.state.leader_renewed_at = deps.clock.monotonic()
    deps.state.is_leader.set()


def renewed(deps: WorkerDeps) -> None:
    """The election renewed the lease now (a leader whose lease lapsed stops its loops)."""
    deps.state.leader_renewed_at = deps.clock.monotonic()


def at(hhmm: str, day: int = 1) -> datetime:
    """``HH:MM`` UTC on 2026-01-``day``."""
    hour, minute = (int(part) for part in hhmm.split(":"))
    return datetime(2026, 1, day, hour, minute, tzinfo=UTC)


def memory_deps(
    clock: FakeClock | None = None, backend: Backend | None = None, **settings: Any
) -> WorkerDeps:
    """A worker's deps on the memory backend (or ``backend``), reading ``clock``."""
    clock = clock or FakeClock(MIDNIGHT)
    backend = backend or InMemoryBackend(clock=clock)
    return Worker(fast_settings(**settings), {}, backend=backend, clock=clock)._build_deps(backend)


async def terminal_job(backend: InMemoryBackend, clock: FakeClock, status: JobStatus) -> JobRow:
    """A job that finished in ``status`` now, reached through protocol calls."""
    job, _ = await job_in(Harness("memory", backend, clock=clock), status)
    return job


async def until(condition: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0) -> None:
    """Wait until ``await check()`` holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.01)
