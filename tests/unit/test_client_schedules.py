"""JobsClient's schedule methods: input checked before any write, unknown names refused,
and ``run_schedule`` enqueueing through the client's own path (naming who ran it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from taskq_core import JobsClient, ScheduleNotFoundError, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import ActorDeclaration, ScheduleExistsError
from taskq_core.backend.protocol.admin import Audit
from taskq_core.errors import ConfigError, MaxPendingExceededError, PayloadValidationError


class Report(BaseModel):
    full: bool


@actor(queue="reports")
async def build_report(payload: Report) -> None:
    """Has a payload model."""


@pytest.fixture
async def client() -> AsyncIterator[JobsClient]:
    async with JobsClient(backend=InMemoryBackend()) as opened:
        yield opened


async def test_create_stores_the_checked_schedule(client: JobsClient) -> None:
    record = await client.create_schedule(
        "nightly", build_report, "0  3 * * *", payload=Report(full=True), timezone="Europe/Berlin"
    )
    assert (record.name, record.actor, record.cron) == ("nightly", "build_report", "0 3 * * *")
    assert record.payload == {"full": True} and record.timezone == "Europe/Berlin"
    assert record.enabled and not record.declared_in_code and record.next_fire_at is not None
    assert await client.get_schedule("nightly") == record
    assert await client.list_schedules(actor=build_report) == [record]
    assert await client.list_schedules(enabled=False) == []
    with pytest.raises(ScheduleExistsError):
        await client.create_schedule("nightly", "other", "0 * * * *")


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"cron": "* * *"}, ConfigError, "^cron: expected a 5-field cron expression"),
        ({"timezone": "Mars/Olympus"}, ConfigError, "^timezone: unknown timezone"),
        ({"payload": {"full": "maybe"}}, PayloadValidationError, "full"),
        ({"name": " "}, ConfigError, "^name: "),
        ({"queue": ""}, ConfigError, "^queue: "),
    ],
)
async def test_bad_input_writes_nothing(
    client: JobsClient, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    values: dict[str, Any] = {"name": "nightly", "cron": "0 3 * * *", "payload": {"full": True}}
    values.update(arguments)
    name, cron = values.pop("name"), values.pop("cron")
    with pytest.raises(error, match=message):
        await client.create_schedule(name, build_report, cron, **values)
    assert await client.list_schedules() == []


async def test_a_by_name_actor_outside_the_registry_takes_any_object(client: JobsClient) -> None:
    record = await client.create_schedule("tick", "remote_actor", "*/5 * * * *", payload={"a": 1})
    assert record.payload == {"a": 1}
    with pytest.raises(ConfigError, match="must be a JSON object"):
        await client.create_schedule("tock", "remote_actor", "*/5 * * * *", payload=[1])  # type: ignore[arg-type]


async def test_update_checks_each_half_against_the_other(client: JobsClient) -> None:
    await client.create_schedule("nightly", build_report, "0 3 * * *", payload={"full": True})
    with pytest.raises(ConfigError, match=r"^timezone: unknown timezone"):
        await client.update_schedule("nightly", timezone="Nowhere/Else")
    client.register(build_report)  # the stored actor's model now checks a new payload
    with pytest.raises(PayloadValidationError):
        await client.update_schedule("nightly", payload={"full": "maybe"})
    record = await client.update_schedule("nightly", cron="30  4 * * *", timezone="Asia/Tokyo")
    assert (record.cron, record.timezone) == ("30 4 * * *", "Asia/Tokyo")
    disabled = await client.update_schedule("nightly", enabled=False)
    assert not disabled.enabled and disabled.next_fire_at is None


async def test_unknown_names_are_refused(client: JobsClient) -> None:
    for call in (
        client.update_schedule("ghost", enabled=False),
        client.delete_schedule("ghost"),
        client.run_schedule("ghost"),
    ):
        with pytest.raises(ScheduleNotFoundError, match="no schedule named 'ghost'"):
            await call
    assert await client.delete_schedule("ghost", missing_ok=True) is False
    assert await client.get_schedule("ghost") is None


async def test_run_enqueues_through_the_clients_path(client: JobsClient) -> None:
    backend = client.backend
    await backend.sync_actor_configs(
        [ActorDeclaration("remote_actor", "remote", {}, None, 1, None)], force=False
    )
    await client.create_schedule("tick", "remote_actor", "*/5 * * * *", payload={"a": 1})
    job = await client.run_schedule("tick")
    assert (job.actor, job.queue, job.payload) == ("remote_actor", "remote", {"a": 1})
    assert job.metadata == {"schedule": "tick", "manual": True}
    record = await client.get_schedule("tick")
    assert record is not None and record.last_fired_at is None
    # max_pending (1, stored) applies as to any enqueue.
    with pytest.raises(MaxPendingExceededError):
        await client.run_schedule("tick")
    assert await client.delete_schedule("tick") is True
    assert await backend.get(job.id) is not None  # its jobs stay


async def test_a_run_names_who_ran_it_and_why_in_its_jobs_metadata(client: JobsClient) -> None:
    await client.create_schedule("tick", "remote_actor", "*/5 * * * *")
    job = await client.run_schedule("tick", audit=Audit(by="ops@host (web UI)", reason="smoke"))
    assert job.metadata == {
        "schedule": "tick",
        "manual": True,
        "by": "ops@host (web UI)",
        "why": "smoke",
    }
