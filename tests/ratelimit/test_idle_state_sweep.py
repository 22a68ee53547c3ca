"""The leader's maintenance sweep deletes limiter state left idle (the instances a keyed limit
made for keys it no longer sees), every few minutes, in bounded calls, and says what it
deleted; the limits answer as before."""

from __future__ import annotations

from datetime import timedelta

import structlog

from taskq_core.backend.protocol import LimitDefinition
from taskq_core.backend.protocol.ratelimit import IdleStateSwept
from taskq_core.clock import FakeClock
from taskq_core.constants import LIMITER_STATE_SWEEP_EVERY
from taskq_core.worker.sweeps.limiter_state import LIMITER_STATE_IDLE, LIMITER_STATE_PER_CALL
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from tests.worker.sweep_support import MIDNIGHT, memory_deps

RATE, BURST = 1.0, 5.0  # back to rest 5 s after a use


async def test_idle_keyed_buckets_go_at_the_next_look_and_come_back_full() -> None:
    clock = FakeClock(MIDNIGHT)
    deps = memory_deps(clock)
    backend = deps.backend
    await backend.register_rate_limits(
        [LimitDefinition("api", "token_bucket", BURST, per_second=RATE, keyed=True)]
    )
    keys = [f"api:tenant-{n}" for n in range(LIMITER_STATE_PER_CALL + 5)]
    for key in keys:
        assert (await backend.acquire_token(key, RATE, BURST)).allowed
    sweep = MaintenanceSweep(deps)
    assert (await sweep.run_once()).idle_limiter_keys_deleted == 0  # all in use just now
    clock.advance(LIMITER_STATE_IDLE + timedelta(seconds=6))
    assert (await backend.acquire_token(keys[0], RATE, BURST)).allowed  # still in use
    with structlog.testing.capture_logs() as logs:
        result = await sweep.run_once()
    assert result.idle_limiter_keys_deleted == len(keys) - 1  # past one call's bound too
    assert [e["idle_limiter_keys_deleted"] for e in logs if e["event"] == "sweep_ran"] == [
        len(keys) - 1
    ]
    # A key seen again starts from a full bucket, as it would have without the sweep.
    grant = await backend.acquire_token(keys[1], RATE, BURST)
    assert grant.allowed and grant.remaining == BURST - 1


async def test_the_limiter_tables_are_read_once_every_few_minutes() -> None:
    clock = FakeClock(MIDNIGHT)
    deps = memory_deps(clock)
    looks: list[timedelta] = []
    sweep_state = deps.backend.sweep_idle_limiter_state

    async def counted(idle: timedelta, limit: int = 1000) -> IdleStateSwept:
        looks.append(idle)
        return await sweep_state(idle, limit)

    deps.backend.sweep_idle_limiter_state = counted  # type: ignore[method-assign]
    sweep = MaintenanceSweep(deps)
    await sweep.run_once()
    clock.advance(LIMITER_STATE_SWEEP_EVERY - 1)
    await sweep.run_once()
    assert looks == [LIMITER_STATE_IDLE]
    clock.advance(1)
    await sweep.run_once()
    assert looks == [LIMITER_STATE_IDLE] * 2
