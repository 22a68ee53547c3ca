"""The embedded server through the real `taskq` binary: start on first use, reuse, stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TASKQ_BIN

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="taskq-embedded-"))
    yield root / "pgdata"
    subprocess.run(
        [TASKQ_BIN, "--dsn", f"embedded:{root / 'pgdata'}", "embedded", "stop"],
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(root, ignore_errors=True)


def _taskq(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(TASKQ_PG_DSN=dsn, NO_COLOR="1")
    return subprocess.run([TASKQ_BIN, *args], env=env, capture_output=True, text=True, timeout=120)


def test_embedded_server_starts_on_first_use_is_shared_and_stops(data_dir: Path) -> None:
    dsn = f"embedded:{data_dir}"
    before = _taskq("embedded", "status", "--json", dsn=dsn)
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["running"] is False

    first = _taskq("migrate", "up", dsn=dsn)
    assert first.returncode == 0, first.stderr
    pid = json.loads(_taskq("embedded", "status", "--json", dsn=dsn).stdout)["pid"]
    assert pid

    second = _taskq("migrate", "status", "--json", dsn=dsn)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["pending"] == 0
    assert json.loads(_taskq("embedded", "status", "--json", dsn=dsn).stdout)["pid"] == pid

    stopped = _taskq("embedded", "stop", dsn=dsn)
    assert stopped.returncode == 0
    assert "stopped" in stopped.stdout
    after = json.loads(_taskq("embedded", "status", "--json", dsn=dsn).stdout)
    assert after["running"] is False and after["initialized"] is True
