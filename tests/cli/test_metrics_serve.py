"""``taskq metrics serve``: a real process serves the fleet metrics over HTTP; bad flags and
a schema it cannot read are one line on stderr and exit 1."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos.pgbouncer import free_port
from tests.cli.conftest import Db, one_error_line
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


@pytest.fixture
def serve(pg: PgTarget) -> Iterator[Callable[..., tuple[subprocess.Popen[str], str]]]:
    """Start ``taskq metrics serve`` on a free port; returns the process and its URL once
    it says it serves."""
    started: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> tuple[subprocess.Popen[str], str]:
        port = free_port()
        proc = subprocess.Popen(
            [TASKQ_BIN, "metrics", "serve", "--port", str(port), *extra],
            env=pg.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the process prints it once it listens
        assert line == f"serving fleet metrics on http://127.0.0.1:{port}/metrics\n", (
            line,
            proc.stderr.read() if proc.poll() is not None and proc.stderr else "",
        )
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)  # also closes its pipes


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_a_metrics_server_process_answers_and_stops_on_sigterm(
    serve: Callable[..., tuple[subprocess.Popen[str], str]], db: Db
) -> None:
    for _ in range(3):
        db.enqueue("resize", queue="media")
    db.failed_job("resize", queue="media")
    proc, base = serve("--window", "10m")

    status, content_type, body = get(f"{base}/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert samples["taskq_fleet_up", ()] == 1
    assert samples["taskq_fleet_window_seconds", ()] == 600
    pending = (("queue", "media"), ("status", "pending"))
    assert samples["taskq_fleet_jobs", pending] == 3
    assert samples["taskq_fleet_failure_ratio", (("queue", "media"),)] == 1
    assert get(f"{base}/nothing-here")[0] == 404

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None and proc.stderr.read() == ""


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--port", "70000"], "--port"),
        (["--port", "0"], "--port"),
        (["--window", "0s"], "--window"),
        (["--window", "soon"], "--window"),
        (["--interval", "0.1"], "--interval"),
        (["--timeout", "0"], "--timeout"),
    ],
)
def test_bad_flags_are_one_line_and_exit_1(cli: Cli, flags: list[str], says: str) -> None:
    assert says in one_error_line(cli("metrics", "serve", *flags))


def test_a_schema_that_is_not_migrated_is_one_line_and_exit_1(cli: Cli) -> None:
    line = one_error_line(cli("metrics", "serve", "--schema", "no_such_schema_here"))
    assert "no_such_schema_here" in line and "taskq migrate up" in line


def test_a_schema_name_that_is_not_an_identifier_is_one_line_and_exit_1(cli: Cli) -> None:
    assert "bad-name" in one_error_line(cli("metrics", "serve", "--schema", "bad-name"))


def test_a_port_in_use_is_one_line_and_exit_1(cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(cli("metrics", "serve", "--port", str(port)))
    assert f"127.0.0.1:{port}" in line and "in use" in line
