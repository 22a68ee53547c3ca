"""``run_at=``: an absolute, timezone-aware start on every client enqueue path; naive times
and ``delay`` with ``run_at`` are refused before any insert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from taskq_core import actor
from taskq_core.backend.protocol import JobFilter
from taskq_core.client import EnqueueItem
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus
from taskq_core.testing import FakeClock, drain, inline_client

START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@actor
async def remind(payload: dict[str, str]) -> str:
    return payload["what"]


async def test_a_job_runs_at_its_time_and_not_before() -> None:
    clock = FakeClock(START)
    async with inline_client(registry=[remind], clock=clock) as client:
        at = START + timedelta(hours=2)
        job = await client.enqueue(remind, {"what": "tea"}, run_at=at)
        [batched] = await client.enqueue_batch([EnqueueItem(remind, {"what": "cake"}, run_at=at)])
        assert (job.status, job.scheduled_at) == (JobStatus.SCHEDULED, at)
        assert (batched.status, batched.scheduled_at) == (JobStatus.SCHEDULED, at)
        clock.advance(timedelta(hours=1, minutes=59))
        assert (await drain(client, [remind]))["succeeded"] == 0
        clock.advance(timedelta(minutes=1))
        assert (await drain(client, [remind]))["succeeded"] == 2


async def test_a_time_in_another_zone_is_the_same_moment() -> None:
    async with inline_client(registry=[remind], clock=FakeClock(START)) as client:
        tokyo = datetime(2026, 12, 6, 9, 0, tzinfo=timezone(timedelta(hours=9)))
        job = await client.enqueue(remind, {"what": "x"}, run_at=tokyo)
        assert job.scheduled_at == datetime(2026, 12, 6, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"run_at": datetime(2026, 12, 6, 9, 0)}, "run_at must be a timezone-aware datetime"),
        ({"run_at": START, "delay": 5}, "give delay or run_at, not both"),
    ],
)
async def test_a_naive_time_or_both_starts_is_refused_before_any_insert(
    options: dict[str, object], message: str
) -> None:
    async with inline_client(registry=[remind]) as client:
        with pytest.raises(ConfigError, match=message):
            await client.enqueue(remind, {"what": "x"}, **options)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=message):
            EnqueueItem(remind, {"what": "x"}, **options)  # type: ignore[arg-type]
        assert await client.backend.list_jobs(JobFilter(limit=None)) == []
