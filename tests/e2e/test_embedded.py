"""The embedded server through the real `taskq` binary: created only on purpose, shared,
found from a subdirectory, and kept stopped after `taskq embedded stop`."""

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

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root() -> Iterator[Path]:
    """A project directory; its embedded server lives in ``.taskq/pgdata``."""
    path = Path(tempfile.mkdtemp(prefix="taskq-embedded-"))
    yield path
    for data_dir in (path / ".taskq" / "pgdata", path / "db" / "pgdata"):
        subprocess.run(
            [TASKQ_BIN, "--dsn", f"embedded:{data_dir}", "embedded", "stop"],
            capture_output=True,
            timeout=60,
        )
    shutil.rmtree(path, ignore_errors=True)


def _taskq(*args: str, dsn: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(TASKQ_PG_DSN=dsn, NO_COLOR="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [TASKQ_BIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _status(dsn: str, cwd: Path) -> dict[str, object]:
    done = _taskq("embedded", "status", "--json", dsn=dsn, cwd=cwd)
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_created_by_start_shared_found_from_a_subdirectory_and_stop_holds(root: Path) -> None:
    data_dir = root / ".taskq" / "pgdata"
    sub = root / "app" / "src"
    sub.mkdir(parents=True)
    assert _status("embedded", root)["initialized"] is False

    created = _taskq("embedded", "start", dsn="embedded", cwd=root)
    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines() == [
        f"created and started the embedded PostgreSQL in {data_dir}",
        "next: taskq migrate up",
    ]
    # From a subdirectory, `embedded` is the project's server: no second one under app/src.
    migrated = _taskq("migrate", "up", dsn="embedded", cwd=sub)
    assert migrated.returncode == 0, migrated.stderr
    pid = _status("embedded", sub)["pid"]
    assert pid and _status(f"embedded:{data_dir}", root)["pid"] == pid
    listed = _taskq("queues", "list", "--json", dsn="embedded", cwd=sub)
    assert listed.returncode == 0, listed.stderr
    assert not (sub / ".taskq").exists()

    again = _taskq("embedded", "start", dsn="embedded", cwd=sub)
    assert again.stdout.strip() == f"the embedded PostgreSQL in {data_dir} is already running"

    stopped = _taskq("embedded", "stop", dsn="embedded", cwd=sub)
    assert stopped.returncode == 0
    assert stopped.stdout.strip() == f"stopped the embedded PostgreSQL in {data_dir}"
    # Operator commands do not undo the stop: they refuse, naming the directory, and it stays
    # stopped until `taskq embedded start`.
    for command in (["jobs", "list"], ["workers", "list"], ["migrate", "status"]):
        refused = _taskq(*command, dsn="embedded", cwd=sub)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            f"error: the embedded database at {data_dir} is stopped; run 'taskq embedded start'"
        ]
    assert _status("embedded", root)["running"] is False

    restarted = _taskq("embedded", "start", dsn="embedded", cwd=root)
    assert restarted.stdout.strip() == f"started the embedded PostgreSQL in {data_dir}"
    listed = _taskq("jobs", "list", "--json", dsn="embedded", cwd=sub)
    assert listed.returncode == 0, listed.stderr


def test_migrate_up_creates_and_a_worker_starts_a_stopped_server_saying_so(root: Path) -> None:
    data_dir = root / "db" / "pgdata"
    dsn = f"embedded:{data_dir}"
    migrated = _taskq("migrate", "up", dsn=dsn, cwd=root)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied" in migrated.stdout
    assert "embedded_postgres_created" in migrated.stderr and str(data_dir) in migrated.stderr
    assert _taskq("embedded", "stop", dsn=dsn, cwd=root).returncode == 0

    worker = _taskq(
        "worker", "--actors", "examples.actors:registry", "--until-idle", dsn=dsn, cwd=root
    )
    assert worker.returncode == 0, worker.stderr
    events = [json.loads(line) for line in worker.stderr.splitlines() if line.startswith("{")]
    started = [e for e in events if e["event"] == "embedded_postgres_started"]
    assert [e["data_dir"] for e in started] == [str(data_dir)]
    assert _status(dsn, root)["running"] is True
