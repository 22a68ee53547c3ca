"""Workgroup files the supervisor's schema and plan tests share, and a neutral environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

VALID = """\
actors = "myapp.actors:registry"

[defaults]
max_concurrency = 4
poll_interval = "2s"
env = { SHARED = "yes", TASKQ_LOG_LEVEL = "WARNING" }

[defaults.health]
check_interval = 10
stale_after = "45s"

[[workers]]
name = "api"
queues = ["default", "urgent"]
max_concurrency = 8
processes = 2
env = { TASKQ_LOG_LEVEL = "DEBUG", TASKQ_HEARTBEAT_INTERVAL = 2 }

[workers.health]
stale_after = 30

[[workers]]
name = "media"
queues = ["media"]
actors = "myapp.media:registry"

[workers.health]
enabled = false
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Effective settings are validated against the environment: keep it neutral."""
    for key in list(os.environ):
        if key.startswith("TASKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env


def write(tmp_path: Path, text: str, name: str = "group.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


W = '[[workers]]\nname = "w"\nqueues = ["q"]\n'
MINIMAL = 'actors = "a.b:registry"\n' + W
