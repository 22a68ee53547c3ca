"""`make demo`: installs TaskQ without the development tools, creates its embedded database
on purpose, and ends with the next steps an operator types."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TASKQ_BIN

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_installs_taskq_without_the_dev_tools() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # -B: print every step, even when this checkout's stamps are fresh.
    plan = subprocess.run(
        ["make", "-n", "-B", "demo"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and "-e" in line]
    assert installs == [".venv/bin/uv pip install --quiet --python .venv/bin/python pip -e ."]
    assert "[dev]" not in plan


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_demo_creates_its_database_and_ends_with_the_next_steps(embedded_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(TASKQ_PG_DSN=f"embedded:{embedded_dir}", NO_COLOR="1", COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--workgroup", "workgroup.example.toml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    taskq = next(line for line in lines if line.strip().endswith(" top")).split()[0]
    assert lines[-5:] == [
        "next steps:",
        f"  export TASKQ_PG_DSN=embedded:{embedded_dir}",
        f"  {taskq} top",
        f"  {taskq} jobs list --status failed",
        f"  {taskq} embedded stop    # when done; 'taskq embedded start' brings it back",
    ]
    # The printed DSN reaches the demo's database.
    env["TASKQ_PG_DSN"] = lines[-4].split("=", 1)[1]
    listed = subprocess.run(
        [TASKQ_BIN, "jobs", "list", "--status", "failed", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count('"charge_card"') == 10
