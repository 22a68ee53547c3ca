"""The one liveness rule: alive while ``now - last_seen_at <= stale_after``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from taskq_core.backend.protocol import WorkerRow
from taskq_core.liveness import (
    DEFAULT_STALE_AFTER,
    heard_from,
    worker_is_alive,
    worker_stale_after,
    worker_state,
)
from taskq_core.settings import TaskqSettings

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
STALE_AFTER = timedelta(seconds=40)


def row(*, silent_for: timedelta, status: str = "running") -> WorkerRow:
    return WorkerRow(
        id=uuid4(),
        hostname="host-a",
        pid=1,
        label=None,
        workgroup_instance=None,
        queues=["default"],
        actors=[],
        concurrency=1,
        version=None,
        started_at=NOW - timedelta(hours=1),
        last_seen_at=NOW - silent_for,
        stopped_at=None,
        status=status,
        is_leader=False,
        running_jobs=0,
    )


@pytest.mark.parametrize(
    ("silent_for", "state"),
    [
        (timedelta(0), "running"),
        (STALE_AFTER, "running"),  # the boundary is still alive (<=)
        (STALE_AFTER + timedelta(microseconds=1), "stale"),
        (timedelta(hours=1), "stale"),
    ],
)
def test_a_running_worker_is_stale_only_past_stale_after(silent_for: timedelta, state: str) -> None:
    worker = row(silent_for=silent_for)
    assert worker_state(worker, NOW, STALE_AFTER) == state
    assert worker_is_alive(worker, NOW, STALE_AFTER) is (state == "running")
    assert heard_from(worker.last_seen_at, NOW, STALE_AFTER) is (state == "running")


def test_a_stopped_worker_is_never_alive_however_recent() -> None:
    worker = row(silent_for=timedelta(0), status="stopped")
    assert worker_state(worker, NOW, STALE_AFTER) == "stopped"
    assert not worker_is_alive(worker, NOW, STALE_AFTER)


def test_stale_after_is_heartbeat_interval_times_failures_plus_one() -> None:
    settings = TaskqSettings.load(heartbeat_interval=5, max_heartbeat_failures=2)
    assert worker_stale_after(settings) == timedelta(seconds=15)
    assert DEFAULT_STALE_AFTER == timedelta(seconds=40)  # 10 s x (3 + 1) at the defaults
