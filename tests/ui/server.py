"""A real ``taskq ui serve`` process on a free port of 127.0.0.1, for the UI tests.

``UiServer.start(target)`` launches the installed ``taskq`` over a test's schema (its own
environment, no inherited ``TASKQ_*``) and returns at once, so the server boots while the
test seeds its jobs; the first use of ``url`` waits until the port accepts connections
(a server that died on the way up raises with what it wrote). ``stop()`` sends SIGTERM and
waits for the exit.
"""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.pgbouncer import free_port
from tests.conftest import TASKQ_BIN, PgTarget

_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
# A port taken between free_port() and the bind: try again on another.
_BIND_TRIES = 3


class UiServerFailed(RuntimeError):
    """The server exited before it served, or never listened."""


@dataclass
class UiServer:
    """One ``taskq ui serve`` and how to reach it."""

    target: PgTarget
    token: str | None
    read_only: bool
    command: list[str] = field(repr=False)
    env: dict[str, str] = field(repr=False)
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="taskq-ui-")[1]))
    fd_limit: int | None = None
    _ready: bool = field(default=False, repr=False)

    @classmethod
    def start(
        cls,
        target: PgTarget,
        *,
        token: str | None = None,
        read_only: bool = False,
        extra_args: tuple[str, ...] = (),
        fd_limit: int | None = None,
        **env: str,
    ) -> UiServer:
        """Launch a server over ``target``; ``url`` waits for it. ``fd_limit``: the most
        files the process may hold open (RLIMIT_NOFILE), as a service manager may set it."""
        if token is not None:
            env["TASKQ_ADMIN_TOKEN"] = token
        command = [TASKQ_BIN, "ui", "serve", *extra_args]
        if read_only:
            command.append("--read-only")
        server = cls(target, token, read_only, command, target.env(**env), fd_limit=fd_limit)
        server._launch()
        return server

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, once the server accepts connections."""
        self.wait_ready()
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        """What an API client sends: the token as a bearer header, when there is one."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _launch(self) -> None:
        self.port = free_port()
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [*self.command, "--port", str(self.port)],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                preexec_fn=None if self.fd_limit is None else self._limit_files,
            )

    def _limit_files(self) -> None:
        assert self.fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def wait_ready(self) -> None:
        """Return once the port accepts a connection; relaunch on another port when this
        one was taken meanwhile; raise when the server exits or never listens."""
        for _ in range(_BIND_TRIES):
            if self._ready or self._poll_port():
                self._ready = True
                return
            output = self.output()
            if "in use" not in output:
                break
            self._launch()
        raise UiServerFailed(f"taskq ui serve exited before serving:\n{self.output()}")

    def _poll_port(self) -> bool:
        """True once the port accepts a connection; False when the process exited first."""
        assert self.process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)  # poll the port until the server binds it
        self.stop()
        raise UiServerFailed(f"taskq ui serve did not listen within {_START_TIMEOUT:g} s")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process is not None and self.process.poll() is None

    def output(self) -> str:
        """What the server wrote (stdout and stderr) so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; its exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.unlink(missing_ok=True)
        return process.returncode
