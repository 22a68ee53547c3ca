"""TASKQ_HEALTH_PORT: /live, /ready and /metrics over TCP for HTTP probes and scrapes (not
/tasks), `taskq health --port`, and a port in use refusing the start in one line."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.settings import TaskqSettings
from taskq_core.worker.health import HealthPortInUseError, HealthServer, probe, probe_port
from taskq_core.worker.runtime import Worker
from tests.conftest import TASKQ_BIN, PgTarget

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return int(probe_socket.getsockname()[1])


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A Unix socket path short enough for the limit, in a directory removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="tq-", dir="/tmp"))
    yield str(directory / "w.sock")
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def make_server(path: str, port: int) -> HealthServer:
    backend = InMemoryBackend()
    settings = TaskqSettings.load(
        health_enabled=True, health_port=port, health_host="127.0.0.1", health_tasks_enabled=True
    )
    deps = Worker(settings, {}, backend=backend, install_signal_handlers=False)._build_deps(backend)
    return HealthServer(deps, deps.liveness, path)


@pytest.fixture
async def served(socket_path: str) -> AsyncIterator[HealthServer]:
    server = make_server(socket_path, free_port())
    await server.start()
    yield server
    await server.stop()


def http_get(port: int, path: str) -> tuple[int, str, str]:
    """A plain HTTP client's GET: (status, content type, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


async def test_probes_and_metrics_answer_over_http_on_the_port(served: HealthServer) -> None:
    port = served.tcp_port
    assert port is not None
    status, kind, body = await asyncio.to_thread(http_get, port, "/live")
    assert (status, kind, json.loads(body)) == (200, "application/json", {"status": "ok"})
    status, _, body = await asyncio.to_thread(http_get, port, "/ready")
    assert status == 200 and json.loads(body)["ready"] is True
    status, kind, _ = await asyncio.to_thread(http_get, port, "/metrics")
    assert status == 200 and kind.startswith("text/plain")
    # Task stacks stay on the socket, whoever can reach the port.
    status, _, _ = await asyncio.to_thread(http_get, port, "/tasks")
    assert status == 404
    assert (await probe(served.path, "/tasks"))[0] == 200


async def test_stop_closes_the_port(socket_path: str) -> None:
    server = make_server(socket_path, free_port())
    await server.start()
    port = server.tcp_port
    assert port is not None
    await server.stop()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_a_port_in_use_refuses_the_start_and_frees_the_socket(socket_path: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        server = make_server(socket_path, port)
        with pytest.raises(HealthPortInUseError, match=f"health port 127.0.0.1:{port} is in use"):
            await server.start()
    assert not Path(socket_path).exists()  # noqa: ASYNC240 - a stat, no I/O wait
    # The socket path is free again for the next start.
    retry = make_server(socket_path, free_port())
    await retry.start()
    await retry.stop()


async def taskq(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, *args, cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_taskq_health_asks_the_port(served: HealthServer) -> None:
    port = served.tcp_port
    assert port is not None
    code, out, err = await taskq("health", "ready", "--port", str(port))
    assert code == 0, err
    assert json.loads(out)["ready"] is True


async def test_taskq_health_on_a_closed_port_is_one_line_and_exit_1() -> None:
    port = free_port()
    code, out, err = await taskq("health", "live", "--port", str(port))
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [f"error: nothing listens on 127.0.0.1:{port} "
                                        "(is the worker running?)"]  # fmt: skip


# --- `taskq worker` ------------------------------------------------------------------------


def worker_env(pg: PgTarget, **extra: str) -> dict[str, str]:
    return pg.env(TASKQ_LOG_LEVEL="WARNING", **extra)


def test_a_port_without_the_health_server_is_a_config_error(taskq_cli: Any) -> None:
    env = {"TASKQ_HEALTH_PORT": "9464", "TASKQ_HEALTH_ENABLED": "false"}
    result = taskq_cli("worker", "--actors", "tests.e2e.e2e_actors:registry", env=env)
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert "TASKQ_HEALTH_PORT is set but TASKQ_HEALTH_ENABLED is false" in line


@pytest.mark.e2e
@pytest.mark.postgres
async def test_a_worker_whose_port_is_taken_exits_1_with_one_line(
    pg: PgTarget, socket_path: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        env = worker_env(pg, TASKQ_HEALTH_PORT=str(port), TASKQ_HEALTH_SOCKET_PATH=socket_path)
        code, _, err = await taskq("worker", "--actors", "tests.e2e.e2e_actors:registry", env=env)
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: health port 127.0.0.1:{port} is in use by another process; give each worker "
        "its own TASKQ_HEALTH_PORT (or leave it unset)"
    ]


# --- `taskq workgroup`: one port per process ------------------------------------------------

GROUP = """\
actors = "tests.e2e.e2e_actors:registry"

[[workers]]
name = "main"
queues = ["default"]
processes = {processes}
{env}
"""


@pytest.mark.parametrize(
    ("processes", "env", "inherited"),
    [(2, 'env = { TASKQ_HEALTH_PORT = "9464" }', None), (2, "", "9464")],
    ids=["in the spec's env", "inherited"],
)
def test_workgroup_check_refuses_children_sharing_a_port(
    taskq_cli: Any, tmp_path: Path, processes: int, env: str, inherited: str | None
) -> None:
    (tmp_path / "group.toml").write_text(GROUP.format(processes=processes, env=env))
    extra = {} if inherited is None else {"TASKQ_HEALTH_PORT": inherited}
    result = taskq_cli("workgroup", "check", "group.toml", "--no-import", env=extra)
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert "TASKQ_HEALTH_PORT 9464 would be bound by 2 children (main-1, main-2)" in line


def test_workgroup_check_accepts_one_port_per_child(taskq_cli: Any, tmp_path: Path) -> None:
    env = 'env = { TASKQ_HEALTH_PORT = "9464" }'
    (tmp_path / "group.toml").write_text(GROUP.format(processes=1, env=env))
    result = taskq_cli("workgroup", "check", "group.toml", "--no-import")
    assert result.exit_code == 0, result.stderr


async def test_a_connection_closed_unanswered_is_a_reset_not_a_parse_error() -> None:
    """A health server at its connection cap closes a newcomer's connection without an
    answer: the probe says so (``taskq health`` prints it on one line), it does not crash."""

    async def close_unanswered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(close_unanswered, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectionResetError, match="closed the connection without an"):
            await probe_port("127.0.0.1", port, "/live")
    finally:
        server.close()
        await server.wait_closed()
