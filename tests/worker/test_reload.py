"""SIGHUP: the worker re-reads its settings, applies the log level and format at once, and
names every other changed setting as needing a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.worker.runtime import Worker
from taskq_core.worker.shutdown import ShutdownOrchestrator


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    error = info


def test_reload_applies_the_log_format_and_names_what_needs_a_restart(
    make_worker: Callable[..., Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = InMemoryBackend()
    worker = make_worker(backend, [], log_format="json", max_concurrency=2)
    log = Recorder()
    worker.log = log
    deps = worker._build_deps(backend)
    monkeypatch.setenv("TASKQ_LOG_FORMAT", "console")
    monkeypatch.setenv("TASKQ_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("TASKQ_MAX_CONCURRENCY", "7")
    ShutdownOrchestrator(deps).reload()
    [(event, fields)] = log.events
    assert event == "worker_reloaded"
    assert fields["log_level"] == "DEBUG"
    assert "max_concurrency" in fields["restart_required_for"]
    assert not {"log_format", "log_level"} & set(fields["restart_required_for"])
