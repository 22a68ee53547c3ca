"""The built wheel ships both packages, the named SQL and every migration."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_wheel_holds_packages_sql_and_migrations(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("taskq-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "taskq_core" / "backend" / "postgres" / "migrations"
    migrations = {f"taskq_core/backend/postgres/migrations/{p.name}" for p in folder.glob("*.sql")}
    assert migrations and migrations <= names
    assert "taskq_core/backend/postgres/sql/migrate.sql" in names
    assert any(n.startswith("taskq_cli/") for n in names)
    assert "taskq_cli/tui/top.tcss" in names  # taskq top's stylesheet is package data
    assert "taskq_core/supervisor/starter.toml" in names  # what `taskq workgroup init` writes
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "taskq = taskq_cli.app:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
