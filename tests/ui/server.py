"""A real ``taskq ui serve`` process on a free port of 127.0.0.1, for the UI tests.

``UiServer.start(target)`` runs the installed ``taskq`` over a test's schema (its own
environment, no inherited ``TASKQ_*``), waits until the port accepts connections and returns
the running server; ``stop()`` sends SIGTERM and waits for it to exit. A server that dies on
the way up raises with what it wrote on stderr.
"""

from __future__ import annotations

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
    """The server exited before it served."""


@dataclass
class UiServer:
    """One running ``taskq ui serve`` and how to reach it."""

    target: PgTarget
    port: int
    token: str | None
    read_only: bool
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        """What an API client sends: the token as a bearer header, when there is one."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @classmethod
    def start(
        cls,
        target: PgTarget,
        *,
        token: str | None = None,
        read_only: bool = False,
        extra_args: tuple[str, ...] = (),
        **env: str,
    ) -> UiServer:
        """Start a server over ``target`` and wait until it accepts connections."""
        if token is not None:
            env["TASKQ_ADMIN_TOKEN"] = token
        full_env = target.env(**env)
        failure = ""
        for _ in range(_BIND_TRIES):
            port = free_port()
            log = Path(tempfile.mkstemp(prefix="taskq-ui-", suffix=".log")[1])
            command = [TASKQ_BIN, "ui", "serve", "--port", str(port), *extra_args]
            if read_only:
                command.append("--read-only")
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    command, env=full_env, stdout=sink, stderr=subprocess.STDOUT
                )
            server = cls(target, port, token, read_only, process, log, full_env)
            if server._wait_ready():
                return server
            failure = log.read_text(errors="replace")
            log.unlink(missing_ok=True)
            if "address already in use" not in failure.lower():
                break
        raise UiServerFailed(f"taskq ui serve exited before serving:\n{failure}")

    def _wait_ready(self) -> bool:
        """True once the port accepts a connection; False when the process exited first."""
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)  # poll the port; uvicorn binds after the first read
        self.stop()
        raise UiServerFailed(f"taskq ui serve did not listen within {_START_TIMEOUT:g} s")

    def output(self) -> str:
        """What the server wrote (stdout and stderr) so far."""
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it lingers; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)
        return self.process.returncode
