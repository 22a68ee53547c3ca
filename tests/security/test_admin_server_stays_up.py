"""The admin server and the worker's health port stay up (issue 33): slow connections that
never finish their request neither starve a real request nor fill the log.

Both servers are real processes, started with a small limit on open files
(RLIMIT_NOFILE 256, as a service manager may set it) so that 500 slow connections are more
than the process could hold: an authenticated UI request and the worker's ``/live`` still
answer, the slow connections are cut, and what the server logged stays small. Each wait has
a generous timeout; nothing asserts how fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.pgbouncer import free_port
from taskq_cli.ui.request_guard import RequestGuard
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.settings import TaskqSettings
from taskq_core.worker.health import HealthServer, probe_port
from taskq_core.worker.runtime import Worker
from tests.conftest import TASKQ_BIN, PgTarget
from tests.security.slow_clients import SlowClients
from tests.ui.conftest import TOKEN, StartUi

ROOT = Path(__file__).resolve().parents[2]
SLOW_CONNECTIONS = 500
FD_LIMIT = 256
# Generous: a request under attack on a busy two-core machine.
ANSWER_TIMEOUT = 30.0
# What the server may write in a whole test: a few lines, never a traceback per connection.
LOG_BOUND = 16 * 1024


async def _authenticated_get(url: str) -> httpx.Response:
    """An authenticated GET, asked as a browser's user would (a reload): a connection the
    full cap closed unanswered (every slot serving or just arrived, the slow ones
    reconnecting) is asked again, up to three times in all, as /live below."""
    async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT) as client:
        for _ in range(2):
            with contextlib.suppress(httpx.RemoteProtocolError):
                return await client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
        return await client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.mark.slow
@pytest.mark.postgres
async def test_slow_connections_leave_the_admin_ui_answering(start_ui: StartUi) -> None:
    server = start_ui(token=TOKEN, fd_limit=FD_LIMIT)
    base = server.url
    async with SlowClients("127.0.0.1", server.port, SLOW_CONNECTIONS) as slow:
        await slow.opened()
        for _ in range(3):
            answer = await _authenticated_get(base + "/api/overview")
            assert answer.status_code == 200, answer.text
            assert "totals" in answer.json()
        await slow.wait_cut(1)  # the server closes connections that never end their request
    assert server.alive()
    log = server.output()
    assert len(log) < LOG_BOUND, f"{len(log)} characters logged:\n{log[:2000]}"
    assert log.count("Traceback") <= 1


@pytest.mark.postgres
async def test_a_request_that_never_ends_its_headers_is_cut(start_ui: StartUi) -> None:
    server = start_ui()
    async with SlowClients("127.0.0.1", server.port, 1) as slow:
        await slow.opened()
        await slow.wait_cut(1)


@pytest.mark.postgres
async def test_request_sizes_are_bounded(start_ui: StartUi) -> None:
    server = start_ui(token=TOKEN)
    async with httpx.AsyncClient(base_url=server.url, timeout=ANSWER_TIMEOUT) as client:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        body = json.dumps({"reason": "x" * (1024 * 1024)})
        too_big = await client.post(
            "/api/queues/emails/pause",
            content=body,
            headers={**bearer, "content-type": "application/json"},
        )
        assert too_big.status_code == 413, too_big.text
        huge_header = await client.get("/api/overview", headers={**bearer, "x-big": "y" * 65536})
        assert huge_header.status_code in (400, 431)
        assert (await client.get("/api/overview", headers=bearer)).status_code == 200
    assert server.alive()


async def test_a_whole_oversized_head_is_refused_however_it_arrived() -> None:
    """h11 measures only a head still incomplete: one that reached it whole in a single
    read (the server saw 200 for a 64 KiB header now and then) is refused before routing."""
    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(1)

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1"), (b"x-big", b"y" * 65536)]
    scope = {
        "type": "http",
        "path": "/api/overview",
        "raw_path": b"/api/overview",
        "headers": headers,
    }
    await RequestGuard(app)(scope, _never_called, send)
    assert seen == [] and sent[0]["status"] == 431
    small = {**scope, "headers": headers[:1]}
    await RequestGuard(app)(small, _never_called, send)
    assert seen == [1]


async def _never_called() -> Any:
    raise AssertionError("the guard read a body")


# --- the worker's health port ------------------------------------------------------------


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A Unix socket path short enough for the limit, in a directory removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="tq-", dir="/tmp"))
    yield str(directory / "w.sock")
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


async def _live(port: int) -> int:
    """/live's status, asked as a kubelet does (failureThreshold 3): a connection the full
    cap closed unanswered (every slot serving or just arrived, the slow ones reconnecting)
    is asked again, up to three times in all."""
    for _ in range(2):
        with contextlib.suppress(ConnectionResetError):
            return (await probe_port("127.0.0.1", port, "/live", timeout=ANSWER_TIMEOUT))[0]
    return (await probe_port("127.0.0.1", port, "/live", timeout=ANSWER_TIMEOUT))[0]


def _wait_live(port: int, worker: subprocess.Popen[bytes]) -> None:
    """Return once the worker's port answers /live (it is starting meanwhile)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited while starting"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/live", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.1)  # the port is not bound yet
    raise AssertionError("the worker's health port did not answer within 60 s")


@pytest.fixture
def worker_port(pg: PgTarget, socket_path: str) -> Iterator[tuple[int, Path]]:
    """A real ``taskq worker`` serving its health port on 127.0.0.1 with few files allowed;
    yields (port, where its output goes)."""
    port = free_port()
    env = pg.env(
        TASKQ_LOG_LEVEL="WARNING",
        TASKQ_HEALTH_PORT=str(port),
        TASKQ_HEALTH_HOST="127.0.0.1",
        TASKQ_HEALTH_SOCKET_PATH=socket_path,
    )
    log = Path(tempfile.mkstemp(prefix="taskq-worker-")[1])
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=_limit_files,
        )  # fmt: skip
    try:
        _wait_live(port, worker)
        yield port, log
        assert worker.poll() is None, "the worker exited under the slow connections"
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.postgres
async def test_slow_connections_leave_live_answering(worker_port: tuple[int, Path]) -> None:
    port, log = worker_port
    async with SlowClients("127.0.0.1", port, SLOW_CONNECTIONS) as slow:
        await slow.opened()
        for _ in range(3):
            assert await _live(port) == 200
        await slow.wait_cut(1)
    output = log.read_text(errors="replace")
    assert len(output) < LOG_BOUND, f"{len(output)} characters logged:\n{output[:2000]}"


def _health_server(path: str, **settings: object) -> HealthServer:
    backend = InMemoryBackend()
    loaded = TaskqSettings.load(health_enabled=True, health_port=free_port(), **settings)
    deps = Worker(loaded, {}, backend=backend, install_signal_handlers=False)._build_deps(backend)
    return HealthServer(deps, deps.liveness, path)


async def test_a_health_request_that_never_ends_is_cut(socket_path: str) -> None:
    server = _health_server(socket_path, health_host="127.0.0.1")
    await server.start()
    try:
        assert server.tcp_port is not None
        async with SlowClients("127.0.0.1", server.tcp_port, 1) as slow:
            await slow.opened()
            await slow.wait_cut(1)
    finally:
        await server.stop()


def _outside_address() -> str | None:
    """An address of this machine other than loopback (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_socket:
        try:
            probe_socket.connect(("192.0.2.1", 9))  # no packet is sent: picks the route
        except OSError:
            return None
        address = str(probe_socket.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def test_the_health_port_listens_on_loopback_by_default(socket_path: str) -> None:
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback")
    server = _health_server(socket_path)
    await server.start()
    try:
        port = server.tcp_port
        assert port is not None
        assert await _live(port) == 200
        with pytest.raises(OSError):
            _, writer = await asyncio.open_connection(outside, port)
            writer.close()
    finally:
        await server.stop()
