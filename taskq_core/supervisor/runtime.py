"""What ``taskq workgroup start`` puts around the manager: runtime dir, health source, children.

``claim_runtime_dir`` locks the directory of the children's health sockets (fcntl) so two
supervisors of one file never share it; ``open_workgroup`` claims it, brings the database up,
opens the ``workers`` table (health source, exit records), yields a manager that spawns
``PopenChild`` and serves the control socket (``control``) beside the health sockets while it
runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Protocol
from uuid import UUID

from taskq_core.backend.protocol import WorkerRow
from taskq_core.errors import ConfigError
from taskq_core.supervisor.children import PopenChild
from taskq_core.supervisor.control import serve_control
from taskq_core.supervisor.manager import PlanReader, WorkgroupManager
from taskq_core.supervisor.plan import WorkgroupPlan
from taskq_core.supervisor.status import EventSink, log_event


@contextlib.contextmanager
def claim_runtime_dir(path: Path) -> Iterator[Path]:
    """Create (mode 0700) and lock the runtime directory for this supervisor's lifetime.

    The lock keeps two supervisors of one file from fighting over the same health sockets.
    Only the supervisor that got the lock removes leftover sockets on the way out: a refused
    second one leaves everything of the running group's alone.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.stat().st_uid != os.getuid():
            raise ConfigError(f"runtime directory {path} belongs to another user")
        lock = (path / "supervisor.lock").open("a+")
    except OSError as exc:
        raise ConfigError(f"cannot use runtime directory {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ConfigError(
            f"another workgroup supervisor (pid {holder}) is using runtime directory {path}"
        ) from None
    except OSError as exc:
        lock.close()
        raise ConfigError(f"cannot lock runtime directory {path}: {exc.strerror or exc}") from None
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield path
    finally:
        for leftover in path.glob("*.sock"):
            with contextlib.suppress(OSError):
                leftover.unlink()
        lock.close()


class WorkersTable(Protocol):
    """What the supervisor reads and writes of the ``workers`` table."""

    async def list_workers(self) -> list[WorkerRow]:
        """Every worker row (the health source)."""

    async def mark_worker_exited(
        self, worker_id: UUID, exit_code: int | None, exit_signal: str | None
    ) -> bool:
        """A reaped child's end, into its row."""


@contextlib.asynccontextmanager
async def postgres_workers_table(
    dsn: str, schema: str, *, lazy: bool
) -> AsyncIterator[WorkersTable]:
    """The ``workers`` table through a small backend of its own. ``lazy``: it connects at its
    first use (a group without health checks starts, as before, while the database is away)."""
    from taskq_core.backend.factory import open_health_backend

    backend = await open_health_backend(dsn, schema, min_size=0 if lazy else 1)
    try:
        yield backend
    finally:
        await backend.close()


@contextlib.asynccontextmanager
async def open_workgroup(
    plan: WorkgroupPlan,
    *,
    pg_dsn: str,
    schema: str,
    base_env: Mapping[str, str] | None = None,
    output_dir: Path | None = None,
    emit: EventSink = log_event,
    read_plan: PlanReader | None = None,
) -> AsyncIterator[WorkgroupManager]:
    """A manager for ``plan`` with everything around it that ``taskq workgroup start`` needs.

    Claims the runtime directory, makes sure the database is up before any child starts (an
    embedded server started by a child would live in that child's process group and die with
    it), and opens the ``workers`` table: the health source when some spec has health checks
    enabled, and where each reaped child's exit is written. ``read_plan`` reads the file again
    for a reload (SIGHUP or ``taskq workgroup reload``).
    """
    with claim_runtime_dir(plan.runtime_dir):
        if output_dir is not None:
            await asyncio.to_thread(output_dir.mkdir, parents=True, exist_ok=True)
        health = any(child.health.enabled for child in plan.children)
        async with postgres_workers_table(pg_dsn, schema, lazy=not health) as workers:
            manager = WorkgroupManager(
                plan,
                spawn=PopenChild,
                health_source=workers.list_workers if health else None,
                record_exit=workers.mark_worker_exited,
                base_env=base_env,
                output_dir=output_dir,
                emit=emit,
                read_plan=read_plan,
            )
            async with serve_control(manager, plan.runtime_dir):
                yield manager
