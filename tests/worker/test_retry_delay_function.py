"""``RetryPolicy(delay=...)``: the application's function decides the wait before a retry,
from the attempt that failed and what it raised; checked when the actor is declared; a
function that raises or answers nonsense falls back to the built-in curve, logged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import structlog

from taskq_core import RetryPolicy, actor
from taskq_core.retry import RetryDelayError
from taskq_core.statemachine import JobStatus
from taskq_core.testing import FakeClock, drain, inline_client

START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def rate_limited_backoff(attempt: int, error: BaseException) -> timedelta:
    """Wait what the upstream asked for; else seven minutes per attempt."""
    if isinstance(error, UpstreamBusy):
        return timedelta(seconds=error.retry_in)
    return timedelta(minutes=7 * attempt)


class UpstreamBusy(Exception):
    def __init__(self, retry_in: float) -> None:
        super().__init__(f"busy, retry in {retry_in}s")
        self.retry_in = retry_in


@actor(retry=RetryPolicy(max_attempts=3, delay=rate_limited_backoff))
async def call_upstream(payload: dict[str, float]) -> None:
    if payload.get("busy"):
        raise UpstreamBusy(payload["busy"])
    raise ConnectionError("down")


@actor(
    retry=RetryPolicy(
        max_attempts=3, base=timedelta(seconds=10), jitter=0, delay=lambda a, e: 1 / 0
    )
)
async def broken_backoff(payload: dict[str, int]) -> None:
    raise ConnectionError("down")


async def test_the_function_decides_each_wait_and_the_budget_still_ends_it() -> None:
    clock = FakeClock(START)
    async with inline_client(registry=[call_upstream], clock=clock) as client:
        job = await client.enqueue(call_upstream, {})
        busy = await client.enqueue(call_upstream, {"busy": 42})
        assert (await drain(client, [call_upstream]))["retried"] == 2
        first, waited = await client.get(job.id), await client.get(busy.id)
        assert first is not None and first.scheduled_at == START + timedelta(minutes=7)
        assert waited is not None and waited.scheduled_at == START + timedelta(seconds=42)

        clock.advance(timedelta(minutes=7))
        await drain(client, [call_upstream])
        second = await client.get(job.id)
        assert second is not None and second.scheduled_at == clock.now() + timedelta(minutes=14)
        clock.advance(timedelta(minutes=14))
        await drain(client, [call_upstream])
        last = await client.get(job.id)
        assert last is not None and last.status is JobStatus.FAILED  # max_attempts=3


async def test_a_failing_function_falls_back_to_the_curve_and_says_so() -> None:
    clock = FakeClock(START)
    async with inline_client(registry=[broken_backoff], clock=clock) as client:
        job = await client.enqueue(broken_backoff, {})
        with structlog.testing.capture_logs() as logs:
            assert (await drain(client, [broken_backoff]))["retried"] == 1
        row = await client.get(job.id)
        assert row is not None and row.scheduled_at == START + timedelta(seconds=10)
        [line] = [e for e in logs if e["event"] == "retry_delay_failed"]
        assert "ZeroDivisionError" in line["error"]


def test_the_operator_cap_still_applies_and_negative_waits_are_none() -> None:
    policy = RetryPolicy(delay=lambda attempt, error: timedelta(days=3))
    assert policy.next_delay(1, max_retry_backoff=HOUR, error=ValueError()) == HOUR
    negative = RetryPolicy(delay=lambda attempt, error: -5)
    assert negative.next_delay(1, max_retry_backoff=HOUR, error=ValueError()) == timedelta(0)
    no_error = RetryPolicy(jitter=0, delay=lambda attempt, error: 99)
    assert no_error.next_delay(1, max_retry_backoff=HOUR) == timedelta(seconds=5)  # the curve


@pytest.mark.parametrize("answer", ["soon", None, float("nan"), 1e300, True])
def test_an_answer_that_is_not_a_delay_is_an_error(answer: object) -> None:
    policy = RetryPolicy(delay=lambda attempt, error: answer)  # type: ignore[arg-type,return-value]
    with pytest.raises(RetryDelayError, match=r"RetryPolicy\.delay returned"):
        policy.next_delay(1, max_retry_backoff=HOUR, error=ValueError())


@pytest.mark.parametrize("function", [lambda: 1, lambda attempt: 1, "5s"])
def test_a_function_that_cannot_take_attempt_and_error_is_refused_at_declaration(
    function: object,
) -> None:
    with pytest.raises(ValueError, match=r"RetryPolicy\.delay must"):
        RetryPolicy(delay=function)  # type: ignore[arg-type]
