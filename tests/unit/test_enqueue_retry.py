"""TransientRetry on an injected clock: the pauses it takes and where its budget ends."""

from __future__ import annotations

import random

import pytest

from taskq_core.enqueue_retry import TransientRetry
from taskq_core.errors import DatabaseUnavailableError, PayloadValidationError


class Time:
    """A monotonic clock that only moves when the retry sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def retry(clock: Time, budget: float) -> TransientRetry:
    return TransientRetry(
        budget, jitter=0.0, monotonic=clock.monotonic, sleep=clock.sleep, rng=random.Random(1)
    )


async def test_pauses_double_up_to_the_maximum_and_stop_at_the_budget() -> None:
    clock = Time()
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise DatabaseUnavailableError("PostgreSQL is unavailable (connection refused)")

    with pytest.raises(DatabaseUnavailableError):
        await retry(clock, 5.0).run(down, what="enqueue")
    # 0.1, 0.2, 0.4, 0.8, 1.6, then the 2 s ceiling, cut to what is left of the budget.
    assert clock.pauses == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 1.9])
    assert clock.now == pytest.approx(5.0)
    assert calls == len(clock.pauses) + 1  # a last attempt when the budget runs out


async def test_calls_of_one_operation_share_the_budget() -> None:
    clock = Time()
    shared = retry(clock, 1.0)
    failures = iter([True, True, False])

    async def flaky() -> str:
        if next(failures):
            raise DatabaseUnavailableError("PostgreSQL is unavailable (restarting)")
        return "ok"

    assert await shared.run(flaky, what="enqueue_prepare") == "ok"

    async def down() -> None:
        raise DatabaseUnavailableError("PostgreSQL is unavailable (restarting)")

    with pytest.raises(DatabaseUnavailableError):
        await shared.run(down, what="enqueue")
    assert clock.now == pytest.approx(1.0)


async def test_other_errors_pass_through_at_once() -> None:
    clock = Time()

    async def invalid() -> None:
        raise PayloadValidationError("width: not an integer")

    with pytest.raises(PayloadValidationError):
        await retry(clock, 30.0).run(invalid, what="enqueue")
    assert clock.pauses == []
