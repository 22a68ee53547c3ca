"""``taskq ui serve`` as an operator runs it: a real process binds, answers (the token
asked of every request, the fleet metrics at /metrics) and stops on SIGTERM with exit 0;
an address beyond loopback without a token, a port in use and a guessable token each end
it with one line and exit 1."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import CliResult, PgTarget
from tests.ui.conftest import TOKEN, StartUi

pytestmark = [pytest.mark.postgres]

Cli = Callable[..., CliResult]


def _one_line_error(result: CliResult) -> str:
    assert result.exit_code == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.slow
def test_serve_binds_answers_with_its_token_and_stops_cleanly(start_ui: StartUi) -> None:
    server = start_ui(token=TOKEN)
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/api/overview").status_code == 401
        page = client.get("/queues")
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/queues"
        answer = client.get("/api/overview", headers=server.headers())
        assert answer.status_code == 200
        assert answer.json()["totals"]["pending"] == 0
        scrape = client.get("/metrics", headers=server.headers())
        assert scrape.status_code == 200 and "taskq_fleet_up 1.0" in scrape.text
    assert f"serving http://127.0.0.1:{server.port}/" in server.output()
    assert server.stop() == 0


def test_a_bind_beyond_loopback_needs_a_token(taskq_cli: Cli, pg: PgTarget) -> None:
    result = taskq_cli("ui", "serve", "--host", "0.0.0.0", "--port", "8080", env=pg.env())
    assert "without TASKQ_ADMIN_TOKEN" in _one_line_error(result)


def test_a_port_in_use_ends_it_with_one_line(taskq_cli: Cli, pg: PgTarget) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = taskq_cli("ui", "serve", "--port", str(port), env=pg.env())
    line = _one_line_error(result)
    assert f"127.0.0.1:{port}: address already in use" in line


def test_a_short_token_is_refused(taskq_cli: Cli, pg: PgTarget) -> None:
    result = taskq_cli("ui", "serve", env=pg.env(TASKQ_ADMIN_TOKEN="hunter2"))
    assert "at least 32" in _one_line_error(result)


@pytest.mark.slow
def test_the_server_writes_uvicorns_warnings_in_taskqs_log_format(start_ui: StartUi) -> None:
    # The web framework would otherwise put its own handler on the root logger: standard
    # records in a second format, through a thread of its own.
    server = start_ui()
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.recv(1024)  # the server's 400, after it logged the request as invalid
    lines = [line for line in server.output().splitlines() if "Invalid HTTP request" in line]
    assert len(lines) == 1, server.output()
    assert "[uvicorn.error]" in lines[0] and not lines[0].startswith("WARNING - "), lines[0]
    assert server.stop() == 0
