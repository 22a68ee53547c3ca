"""Operator commands never create an embedded database: a missing data directory (a typo, the
wrong working directory) is one line naming it and how to make one, exit 1, nothing created.

Real `taskq` processes; no server is started, so these are quick.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from taskq_core import embedded
from tests.conftest import TASKQ_BIN

pytestmark = pytest.mark.e2e

# Every command that only reads, or changes rows of a database that must already exist.
OPERATOR_COMMANDS = [
    ["jobs", "list"],
    ["jobs", "show", str(uuid.UUID(int=1))],
    ["jobs", "explain", str(uuid.UUID(int=1))],
    ["queues", "list"],
    ["workers", "list"],
    ["actor-config", "list"],
    ["actor-config", "get", "resize"],
    ["migrate", "status"],
    ["prune", "--dry-run"],
    ["enqueue", "resize"],
    ["cancel", str(uuid.UUID(int=1))],
    ["queues", "pause", "default"],
    ["top"],
    ["embedded", "stop"],
]


def taskq(*args: str, cwd: Path, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env["NO_COLOR"] = "1"
    if dsn is not None:
        env["TASKQ_PG_DSN"] = dsn
    return subprocess.run(
        [TASKQ_BIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_a_typo_path_is_refused_and_nothing_is_created(tmp_path: Path, command: list[str]) -> None:
    typo = tmp_path / "typo" / "pgdata"
    result = taskq(*command, "--dsn", f"embedded:{typo}", cwd=tmp_path, dsn=None)
    assert result.returncode == 1, result
    assert result.stderr.splitlines() == [
        f"error: there is no embedded database at {typo}; "
        f"create it with 'taskq embedded start --dsn embedded:{typo}'"
    ]
    assert tree(tmp_path) == []


def test_plain_embedded_with_no_taskq_directory_up_the_tree_says_where_it_looked(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app" / "src"
    app.mkdir(parents=True)
    result = taskq("jobs", "list", cwd=app, dsn="embedded")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: there is no embedded database in {app} or its parents (no .taskq/pgdata); "
        f"create one at {app / '.taskq' / 'pgdata'} with 'taskq embedded start'"
    ]
    assert tree(tmp_path) == ["app", "app/src"]


def test_plain_embedded_finds_the_nearest_taskq_directory_up_the_tree(tmp_path: Path) -> None:
    data_dir = tmp_path / ".taskq" / "pgdata"
    data_dir.mkdir(parents=True)  # a directory, not yet a database
    deep = tmp_path / "app" / "src" / "pkg"
    deep.mkdir(parents=True)
    status = taskq("embedded", "status", "--json", cwd=deep, dsn="embedded")
    assert status.returncode == 0, status.stderr
    assert '"data_dir": "' + str(data_dir) + '"' in status.stdout
    result = taskq("queues", "list", cwd=deep, dsn="embedded")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: there is no embedded database at {data_dir}; create it with 'taskq embedded start'"
    ]
    assert list(data_dir.iterdir()) == []


def test_a_worker_does_not_create_a_database_either(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    result = taskq(
        "worker", "--actors", "examples.actors:registry", "--until-idle",
        "--dsn", f"embedded:{typo}", cwd=Path.cwd(), dsn=None,
    )  # fmt: skip
    assert result.returncode == 1, result
    assert f"there is no embedded database at {typo}" in result.stderr
    assert not typo.exists()


def test_data_dir_lookup(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert embedded.find_data_dir(nested) is None
    assert embedded.data_dir_for("embedded", nested) == nested / ".taskq" / "pgdata"
    (tmp_path / ".taskq" / "pgdata").mkdir(parents=True)
    (tmp_path / "a" / ".taskq").mkdir()  # a .taskq without a database does not stop the search
    assert embedded.data_dir_for("embedded", nested) == tmp_path / ".taskq" / "pgdata"
    assert embedded.data_dir_for("embedded:rel/dir", nested) == nested / "rel" / "dir"
    assert embedded.data_dir_for(f"embedded:{tmp_path}/x", nested) == tmp_path / "x"
