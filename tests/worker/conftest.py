"""Fixtures for driving a real Worker in-process, on the memory backend by default."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend
from taskq_core.clock import Clock
from taskq_core.di import ProviderRegistry
from taskq_core.settings import TaskqSettings
from taskq_core.worker.runtime import Worker

FAST = dict(
    heartbeat_interval=0.1,
    lock_lease=2.0,
    cancellation_grace_period=0.4,
    cleanup_grace_period=0.4,
    termination_grace_period=10.0,
    scheduled_wake_interval=0.05,
    sweep_interval=0.2,
    poll_interval=0.05,
    notify_poll_interval=0.05,
    idle_poll_interval=0.05,
    idle_settle_window=0.0,
    max_concurrency=4,
    health_enabled=False,
)


def fast_settings(**overrides: Any) -> TaskqSettings:
    """Settings with every cadence shortened for tests."""
    values = {**FAST, **overrides}
    return TaskqSettings.load(**values)


@pytest.fixture
def make_worker() -> Callable[..., Worker]:
    """Build a Worker on a given backend with fast settings and no signal handlers."""

    def build(
        backend: Backend,
        registry: Mapping[str, ActorRef] | list[ActorRef],
        *,
        until_idle: bool = True,
        providers: ProviderRegistry | None = None,
        clock: Clock | None = None,
        **overrides: Any,
    ) -> Worker:
        actors = {r.name: r for r in registry} if isinstance(registry, list) else dict(registry)
        return Worker(
            fast_settings(**overrides),
            actors,
            backend=backend,
            providers=providers,
            clock=clock,
            until_idle=until_idle,
            install_signal_handlers=False,
        )

    return build
