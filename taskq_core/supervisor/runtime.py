"""What ``taskq workgroup start`` puts around the manager: runtime dir, health source, children.

``claim_runtime_dir`` locks the directory of the children's health sockets (fcntl) so two
supervisors of one file never share it; ``open_workgroup`` claims it, brings the database up,
opens the ``workers``-table health source, yields a manager that spawns ``PopenChild`` and
serves the control socket (``control``) beside the health sockets while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

from taskq_core.errors import ConfigError
from taskq_core.supervisor.children import PopenChild
from taskq_core.supervisor.control import serve_control
from taskq_core.supervisor.health_check import HealthSource
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


@contextlib.asynccontextmanager
async def postgres_health_source(dsn: str, schema: str) -> AsyncIterator[HealthSource]:
    """A health source reading the ``workers`` table through a small backend of its own."""
    from taskq_core.backend.factory import open_health_backend

    backend = await open_health_backend(dsn, schema)
    try:
        yield backend.list_workers
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
    it), and opens the health source when some spec has health checks enabled. ``read_plan``
    reads the file again for a reload (SIGHUP or ``taskq workgroup reload``).
    """
    from taskq_core.backend.factory import prepare_dsn
    from taskq_core.embedded import is_embedded_dsn

    with claim_runtime_dir(plan.runtime_dir):
        if output_dir is not None:
            await asyncio.to_thread(output_dir.mkdir, parents=True, exist_ok=True)
        async with contextlib.AsyncExitStack() as stack:
            source: HealthSource | None = None
            if any(child.health.enabled for child in plan.children):
                source = await stack.enter_async_context(postgres_health_source(pg_dsn, schema))
            elif is_embedded_dsn(pg_dsn):
                await asyncio.to_thread(prepare_dsn, pg_dsn)
            manager = WorkgroupManager(
                plan,
                spawn=PopenChild,
                health_source=source,
                base_env=base_env,
                output_dir=output_dir,
                emit=emit,
                read_plan=read_plan,
            )
            async with serve_control(manager, plan.runtime_dir):
                yield manager
