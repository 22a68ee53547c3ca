"""`taskq health live|ready` finds the worker's socket: none, one, several, --pid, the setting."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.settings import TaskqSettings
from taskq_core.worker.health import HealthServer
from taskq_core.worker.runtime import Worker
from tests.cli.conftest import one_error_line
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


class ServedWorker:
    """A real HealthServer on its default path, served from a thread of its own (the CLI
    under test runs its own event loop in the test's thread)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the health server did not start"

    async def _serve(self) -> None:
        backend = InMemoryBackend()
        settings = TaskqSettings.load(health_enabled=True)
        deps = Worker(settings, {}, backend=backend, install_signal_handlers=False)._build_deps(
            backend
        )
        server = HealthServer(deps, deps.liveness)
        await server.start()
        self.path, self._loop, self._stop = server.path, asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.stop()

    def close(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def xdg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """XDG_RUNTIME_DIR aimed at a fresh short directory; yields the socket directory."""
    base = Path(tempfile.mkdtemp(prefix="tqx-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    yield base / "taskq"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def served(xdg: Path) -> Iterator[ServedWorker]:
    worker = ServedWorker()
    yield worker
    worker.close()


@pytest.fixture
def other_pid() -> Iterator[int]:
    """The pid of another live process."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def fake_socket(directory: Path, pid: int) -> Path:
    """A ``worker-<pid>.sock`` file, as that pid's worker would have left it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"worker-{pid}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    return path


def health(taskq_cli: Any, *args: str, xdg: Path) -> CliResult:
    result: CliResult = taskq_cli("health", *args, env={"XDG_RUNTIME_DIR": str(xdg.parent)})
    return result


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_no_worker_is_one_error_line_naming_the_directory(taskq_cli: Any, xdg: Path) -> None:
    fake_socket(xdg, dead_pid())  # a SIGKILLed worker's leftover does not count
    line = one_error_line(health(taskq_cli, "live", xdg=xdg))
    assert str(xdg) in line and "--socket" in line


def test_the_one_live_worker_is_found_and_probed(
    taskq_cli: Any, xdg: Path, served: ServedWorker
) -> None:
    fake_socket(xdg, dead_pid())
    result = health(taskq_cli, "live", xdg=xdg)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"status": "ok"}
    ready = health(taskq_cli, "ready", xdg=xdg)
    assert ready.exit_code == 0 and json.loads(ready.stdout)["database"]["available"] is True


def test_several_workers_are_an_error_listing_their_pids(
    taskq_cli: Any, xdg: Path, served: ServedWorker, other_pid: int
) -> None:
    fake_socket(xdg, other_pid)
    line = one_error_line(health(taskq_cli, "ready", xdg=xdg))
    assert str(os.getpid()) in line and str(other_pid) in line
    assert "--socket" in line and "--pid" in line


def test_pid_picks_one_of_several(
    taskq_cli: Any, xdg: Path, served: ServedWorker, other_pid: int
) -> None:
    fake_socket(xdg, other_pid)
    result = health(taskq_cli, "live", "--pid", str(os.getpid()), xdg=xdg)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"status": "ok"}


def test_pid_of_no_running_process_is_an_error(taskq_cli: Any, xdg: Path) -> None:
    pid = dead_pid()
    assert str(pid) in one_error_line(health(taskq_cli, "live", "--pid", str(pid), xdg=xdg))


def test_the_setting_wins_over_discovery(
    taskq_cli: Any, xdg: Path, served: ServedWorker, other_pid: int
) -> None:
    fake_socket(xdg, other_pid)  # discovery alone would find two
    assert served.path is not None
    result = taskq_cli(
        "health",
        "live",
        env={"XDG_RUNTIME_DIR": str(xdg.parent), "TASKQ_HEALTH_SOCKET_PATH": served.path},
    )
    assert result.exit_code == 0, result.stderr


def test_an_explicit_socket_wins_and_a_missing_one_is_one_line(
    taskq_cli: Any, xdg: Path, served: ServedWorker
) -> None:
    assert served.path is not None
    assert health(taskq_cli, "live", "--socket", served.path, xdg=xdg).exit_code == 0
    missing = str(xdg / "nobody.sock")
    assert missing in one_error_line(health(taskq_cli, "live", "--socket", missing, xdg=xdg))


def test_socket_and_pid_together_are_a_usage_error(taskq_cli: Any, xdg: Path) -> None:
    line = one_error_line(
        health(taskq_cli, "live", "--socket", "/tmp/x.sock", "--pid", "1", xdg=xdg)
    )
    assert "not both" in line


def test_pid_finds_a_socket_its_supervisor_put_elsewhere(
    taskq_cli: Any, xdg: Path, served: ServedWorker
) -> None:
    # A workgroup child serves at <runtime dir>/<label>.sock, the TASKQ_HEALTH_SOCKET_PATH
    # its supervisor starts it with; --pid reads that from the process.
    assert served.path is not None
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "TASKQ_HEALTH_SOCKET_PATH": served.path},
    )
    try:
        result = health(taskq_cli, "live", "--pid", str(child.pid), xdg=xdg)
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout) == {"status": "ok"}
    finally:
        child.kill()
        child.wait()
