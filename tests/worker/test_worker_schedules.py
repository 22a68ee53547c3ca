"""A worker start writes the registry's ``@cron`` schedules: created, rewritten from the code
with the operator's ``enabled`` kept, orphans reported, and the ``--until-idle`` warning."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from taskq_core import actor, cron
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import ScheduleUpdate
from taskq_core.errors import ConfigError
from taskq_core.worker.runtime import Worker


@cron("0 3 * * *", name="nightly", timezone="Europe/Berlin", payload={"full": True})
@actor
async def report(payload: dict[str, Any]) -> None:
    """Declares one schedule."""


@actor
async def plain(payload: dict[str, Any]) -> None:
    """Declares none."""


@pytest.fixture
def backend() -> InMemoryBackend:
    return InMemoryBackend()


async def start(worker: Worker) -> list[dict[str, Any]]:
    """Run an until-idle worker over empty queues to its end; the events it logged."""
    with structlog.testing.capture_logs() as logs:
        assert await asyncio.wait_for(worker.run(), 20) == 0
    return logs


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


async def test_a_worker_start_creates_the_declared_schedules(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    logs = await start(make_worker(backend, [report, plain]))
    record = await backend.get_schedule("nightly")
    assert record is not None
    assert (record.actor, record.cron, record.timezone) == ("report", "0 3 * * *", "Europe/Berlin")
    assert record.payload == {"full": True} and record.queue is None
    assert record.enabled and record.declared_in_code
    (synced,) = events(logs, "schedules_synced")
    assert synced["created"] == ["nightly"] and synced["updated"] == []
    assert [r.name for r in await backend.list_schedules()] == ["nightly"]


async def test_a_restart_takes_the_codes_fields_and_keeps_an_operators_disable(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    await start(make_worker(backend, [report]))
    await backend.update_schedule("nightly", ScheduleUpdate(enabled=False))
    moved = cron("30 4 * * *", name="nightly", payload={"full": False})(
        actor(name="report")(report.fn)
    )
    logs = await start(make_worker(backend, [moved]))
    record = await backend.get_schedule("nightly")
    assert record is not None
    assert (record.cron, record.timezone, record.payload) == ("30 4 * * *", "UTC", {"full": False})
    assert not record.enabled and record.next_fire_at is None  # still the operator's disable
    assert events(logs, "schedules_synced")[0]["updated"] == ["nightly"]
    # Unchanged code: nothing to say.
    assert events(await start(make_worker(backend, [moved])), "schedules_synced") == []


async def test_a_schedule_the_code_no_longer_declares_is_reported_not_deleted(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    await start(make_worker(backend, [report]))
    logs = await start(make_worker(backend, [plain]))
    (orphaned,) = events(logs, "schedules_orphaned")
    assert orphaned["log_level"] == "warning"
    assert orphaned["schedules"] == ["nightly"]
    assert "delete it with `taskq schedules delete NAME`" in orphaned["note"]
    assert await backend.get_schedule("nightly") is not None


async def test_until_idle_with_a_cron_schedule_warns_at_start(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    (warning,) = events(
        await start(make_worker(backend, [report])), "until_idle_with_cron_schedules"
    )
    assert warning["log_level"] == "warning" and warning["schedules"] == ["nightly"]
    assert "--until-idle is incompatible with cron-driven workloads" in warning["note"]
    quiet = await start(make_worker(InMemoryBackend(), [plain]))
    assert events(quiet, "until_idle_with_cron_schedules") == []


async def test_two_actors_declaring_one_schedule_name_refuse_the_start(
    backend: InMemoryBackend, make_worker: Callable[..., Worker]
) -> None:
    clash = cron("0 * * * *", name="nightly")(actor(name="other")(plain.fn))
    with pytest.raises(ConfigError, match="'nightly'"):
        await make_worker(backend, [report, clash]).run()
    assert await backend.list_schedules() == []
