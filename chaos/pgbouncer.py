"""A real PgBouncer in transaction mode in front of a PostgreSQL server, for tests and benchmarks.

``PgBouncer(server_dsn, root).start()`` writes a config into ``root`` (every database name
maps to the server at ``server_dsn``, logged in as that DSN's user: ``auth_type = any``),
starts ``pgbouncer`` on a free port of 127.0.0.1 and returns the DSN to reach it.
PgBouncer refuses to run as root: as root it is started with ``-u`` and an unprivileged
user. ``find_pgbouncer(install=True)`` installs the Debian package when it is missing and
this process is root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from chaos.apt import AptInstallError, install_once

PACKAGE = "pgbouncer"  # the Debian package and the binary's name
# Where Debian puts it: /usr/sbin is not on every user's PATH.
_KNOWN_PATHS = ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/bin/pgbouncer")
_START_TIMEOUT = 15.0


class PgBouncerUnavailable(RuntimeError):
    """No pgbouncer binary here, and it could not be installed."""


def find_pgbouncer(*, install: bool = False) -> str:
    """The pgbouncer binary; with ``install``, as root, ``apt-get install`` it when missing."""
    found = _located()
    if found:
        return found
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PgBouncerUnavailable(
            "pgbouncer is not installed (Debian: apt-get install pgbouncer); the tests install "
            "it themselves only when run as root"
        )
    try:
        install_once(PACKAGE, lambda: _located() is not None)
    except AptInstallError as exc:
        raise PgBouncerUnavailable(str(exc)) from exc
    return find_pgbouncer(install=False)


def _located() -> str | None:
    return shutil.which(PACKAGE) or next((p for p in _KNOWN_PATHS if os.access(p, os.X_OK)), None)


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unprivileged_user(server_host: str) -> str | None:
    """Who pgbouncer runs as when this process is root (it refuses root); None otherwise.
    A server on a Unix socket: the owner of the socket's directory, who may enter it (an
    embedded server's data directory is private to its user)."""
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/"):
        with contextlib.suppress(OSError, KeyError):
            owner = pwd.getpwuid(os.stat(server_host).st_uid).pw_name
            if owner != "root":
                return owner
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise PgBouncerUnavailable("running as root, and no 'postgres' or 'nobody' user to run as")


def _server_host(server_dsn: str) -> str:
    """The host (or Unix socket directory) of ``server_dsn``."""
    parts = urlsplit(server_dsn)
    return parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[-1]


def _server_line(server_dsn: str) -> tuple[str, str]:
    """The ``[databases]`` connection string for ``server_dsn`` and the user it logs in as."""
    parts = urlsplit(server_dsn)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    user = unquote(parts.username or query.get("user") or "postgres")
    host = _server_host(server_dsn)
    port = str(parts.port or query.get("port") or 5432)
    fields = {"host": host, "port": port, "user": user}
    password = parts.password or query.get("password")
    if password:
        fields["password"] = unquote(password)
    return " ".join(f"{key}={value}" for key, value in fields.items()), user


class PgBouncer:
    """One pgbouncer process in transaction mode; ``dsn(database)`` reaches it."""

    def __init__(
        self,
        server_dsn: str,
        root: Path,
        *,
        pool_size: int = 20,
        max_client_conn: int = 1000,
        binary: str | None = None,
    ) -> None:
        self.server_dsn = server_dsn
        self.root = root
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.binary = binary
        self.port = 0
        self.log_path = root / "pgbouncer.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._user = ""

    def config(self) -> str:
        """The pgbouncer.ini text for this instance."""
        server, self._user = _server_line(self.server_dsn)
        return "\n".join(
            [
                "[databases]",
                f"* = {server}",  # any database name, on the one server
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = any",
                "pool_mode = transaction",
                f"default_pool_size = {self.pool_size}",
                f"max_client_conn = {self.max_client_conn}",
                # Give idle server connections back soon: the server may be shared.
                "server_idle_timeout = 10",
                "server_login_retry = 1",
                # A session's application_name tells whether it came through PgBouncer:
                # "taskq_x - 127.0.0.1:40312" through it, "taskq_x" directly.
                "application_name_add_host = 1",
                "log_connections = 0",
                "log_disconnections = 0",
                "",
            ]
        )

    def start(self) -> str:
        """Start pgbouncer on a free port and wait until it accepts connections; its DSN."""
        binary = self.binary or find_pgbouncer(install=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # readable by the unprivileged user it switches to
        self.port = free_port()
        ini = self.root / "pgbouncer.ini"
        ini.write_text(self.config())
        ini.chmod(0o644)
        command = [binary]
        user = _unprivileged_user(_server_host(self.server_dsn))
        if user is not None:
            command += ["-u", user]
        command.append(str(ini))
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_listening()
        return self.dsn()

    def dsn(self, database: str | None = None) -> str:
        """A DSN through this pgbouncer to ``database`` (default: the server DSN's)."""
        name = database or urlsplit(self.server_dsn).path.lstrip("/") or self._user
        return f"postgresql://{self._user}@127.0.0.1:{self.port}/{name}"

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(
            f"pgbouncer did not listen within {_START_TIMEOUT:g}s:\n{self.log_tail()}"
        )

    def log_tail(self, size: int = 2000) -> str:
        """The end of pgbouncer's log."""
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Shut pgbouncer down (SIGTERM: at once, closing every client); idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
