"""HealthServer: one socket per worker, never stolen from a live one; /ready and the database."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import WorkerRow
from taskq_core.errors import ConfigError, DatabaseUnavailableError, HealthSocketInUseError
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.health import (
    HealthServer,
    default_socket_path,
    discover_sockets,
    probe,
    runtime_dir,
)
from taskq_core.worker.runtime import Worker


class PingBackend(InMemoryBackend):
    """Counts the health ping (``get_leader``); fails or hangs it on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.pings = 0
        self.fail: BaseException | None = None
        self.hang = False

    async def get_leader(self) -> WorkerRow | None:
        self.pings += 1
        if self.fail is not None:
            raise self.fail
        if self.hang:
            await asyncio.sleep(30)
        return await super().get_leader()


def make_deps(backend: InMemoryBackend | None = None, **settings: Any) -> WorkerDeps:
    """A real WorkerDeps, built the way the worker builds its own."""
    backend = backend or PingBackend()
    loaded = TaskqSettings.load(health_enabled=True, **settings)
    worker = Worker(loaded, {}, backend=backend, install_signal_handlers=False)
    return worker._build_deps(backend)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a Unix socket path has ~100 bytes at most)."""
    path = Path(tempfile.mkdtemp(prefix="tqh-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def server(path: Path | None, deps: WorkerDeps | None = None) -> HealthServer:
    deps = deps or make_deps()
    return HealthServer(deps, deps.liveness, None if path is None else str(path))


def stale_socket(path: Path) -> None:
    """A socket file nobody serves any more, as a SIGKILLed worker leaves behind."""
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()


# --- one socket per worker ---------------------------------------------------------------


def test_the_runtime_dir_follows_xdg_runtime_dir_else_tmp_per_user() -> None:
    assert runtime_dir({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path("/run/user/7/taskq")
    assert runtime_dir({}) == Path(f"/tmp/taskq-{os.getuid()}")
    assert default_socket_path(321, {}) == Path(f"/tmp/taskq-{os.getuid()}/worker-321.sock")


async def test_by_default_each_process_gets_its_own_socket_in_a_private_directory(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    health = server(None)
    expected = short_dir / "taskq" / f"worker-{os.getpid()}.sock"
    assert health.path == str(expected)
    await health.start()
    try:
        assert stat.S_IMODE((short_dir / "taskq").stat().st_mode) == 0o700
        assert await probe(health.path, "/live") == (200, '{"status":"ok"}')
        assert discover_sockets(short_dir / "taskq") == {os.getpid(): Path(health.path)}
    finally:
        await health.stop()
    assert not expected.exists()


async def test_a_second_server_refuses_a_path_a_live_one_serves(short_dir: Path) -> None:
    path = short_dir / "h.sock"
    first, second = server(path), server(path)
    await first.start()
    try:
        with pytest.raises(HealthSocketInUseError) as refused:
            await second.start()
        assert isinstance(refused.value, ConfigError)
        message = str(refused.value)
        assert str(path) in message and "\n" not in message
        assert (await probe(str(path), "/live"))[0] == 200  # the first one still answers
        await second.stop()  # never bound: must not remove the first one's socket
        assert (await probe(str(path), "/live"))[0] == 200
    finally:
        await first.stop()


async def test_a_stale_socket_file_is_replaced(short_dir: Path) -> None:
    path = short_dir / "h.sock"
    stale_socket(path)
    health = server(path)
    await health.start()
    try:
        assert (await probe(str(path), "/live"))[0] == 200
    finally:
        await health.stop()
    assert not path.exists()


async def test_a_path_that_is_not_a_socket_is_left_alone(short_dir: Path) -> None:
    path = short_dir / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(ConfigError, match="not a socket"):
        await server(path).start()
    assert path.read_text() == "keep me"


async def test_stop_leaves_a_socket_that_is_no_longer_ours(short_dir: Path) -> None:
    path = short_dir / "h.sock"
    old = server(path)
    await old.start()
    os.unlink(path)  # someone removed it, and a new worker took the path over
    new = server(path)
    await new.start()
    try:
        await old.stop()
        assert (await probe(str(path), "/live"))[0] == 200
    finally:
        await new.stop()
    assert not path.exists()


# --- /ready and the database -------------------------------------------------------------


async def ready(deps: WorkerDeps) -> tuple[int, dict[str, Any]]:
    status, _, body = await server(None, deps).route("GET", "/ready")
    return status, json.loads(body)


async def test_ready_is_200_with_the_database_available() -> None:
    deps = make_deps()
    status, body = await ready(deps)
    assert status == 200 and body["reasons"] == []
    assert body["database"] == {"available": True, "outage_seconds": None, "last_error": None}


async def test_ready_is_503_during_an_outage_without_querying_the_database() -> None:
    backend = PingBackend()
    deps = make_deps(backend)
    deps.database.failed("producer", DatabaseUnavailableError("connection refused"))
    status, body = await ready(deps)
    assert status == 503 and body["ready"] is False
    assert body["reasons"] == ["database_unavailable"]
    database = body["database"]
    assert database["available"] is False and database["last_error"] == "connection refused"
    assert isinstance(database["outage_seconds"], float) and database["outage_seconds"] >= 0
    assert backend.pings == 0
    live = await server(None, deps).route("GET", "/live")
    assert live[0] == 200  # the worker itself is fine: no restart wanted
    deps.database.succeeded()
    assert (await ready(deps))[0] == 200


async def test_a_failed_ping_makes_ready_503_and_begins_the_outage() -> None:
    backend = PingBackend()
    backend.fail = DatabaseUnavailableError("the database system is shutting down")
    deps = make_deps(backend)
    status, body = await ready(deps)
    assert status == 503 and body["reasons"] == ["database_unavailable"]
    assert body["database"]["last_error"] == "the database system is shutting down"
    assert deps.database.ongoing  # every loop now sees the outage too


async def test_a_ping_without_an_answer_in_time_makes_ready_503() -> None:
    backend = PingBackend()
    backend.hang = True
    deps = make_deps(backend, health_pg_ping_timeout=0.05)
    status, body = await ready(deps)
    assert status == 503 and body["reasons"] == ["database_unavailable"]
    assert body["database"] == {
        "available": False,
        "outage_seconds": None,
        "last_error": "no answer within 0.05s",
    }
