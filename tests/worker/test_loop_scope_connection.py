"""The seeds' LOOP-scope connection warning: a worker whose DSNs differ (the pooled one may be
a transaction-mode PgBouncer) says so at start when an asyncpg connection is kept in LOOP
scope, registered there or asked for there by an actor, and says nothing otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import asyncpg
import pytest
import structlog

from taskq_core import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.di import ProviderRegistry, Scope
from taskq_core.worker.runtime import Worker, loop_scope_connections

DIRECT = "postgresql://app@db-primary:5432/jobs"
POOLED = "postgresql://app@pgbouncer:6432/jobs"


async def _connect() -> asyncpg.Connection:
    raise AssertionError("never called: the worker only looks at the registration")


@actor
async def plain(payload: dict[str, Any]) -> None:
    """Asks for nothing."""


@actor
async def asks_loop_connection(
    payload: dict[str, Any], conn: Annotated[asyncpg.Connection, Scope.LOOP]
) -> None:
    """Keeps a connection for the event loop's lifetime."""


def _registered_in_loop_scope() -> ProviderRegistry:
    providers = ProviderRegistry()
    providers.register(asyncpg.Connection, _connect, scope=Scope.LOOP)
    return providers


async def _warnings(worker: Worker) -> list[dict[str, Any]]:
    with structlog.testing.capture_logs() as logs:
        assert await asyncio.wait_for(worker.run(), 20) == 0
    return [entry for entry in logs if entry["event"] == "loop_scope_conn_dsn_mismatch"]


async def test_split_dsns_with_a_loop_scope_connection_warn_at_start(
    make_worker: Callable[..., Worker],
) -> None:
    worker = make_worker(
        InMemoryBackend(),
        [plain],
        providers=_registered_in_loop_scope(),
        pg_dsn_direct=DIRECT,
        pg_dsn_pooled=POOLED,
    )
    (warning,) = await _warnings(worker)
    assert warning["providers"] == ["asyncpg.connection.Connection"]
    assert warning["log_level"] == "warning"


@pytest.mark.parametrize(
    ("pooled", "providers"),
    [
        (DIRECT, _registered_in_loop_scope),  # one endpoint: sessions hold
        (POOLED, ProviderRegistry),  # nothing kept in LOOP scope
    ],
    ids=["same-dsn", "no-loop-connection"],
)
async def test_no_warning_when_nothing_depends_on_a_pooled_session(
    make_worker: Callable[..., Worker],
    pooled: str,
    providers: Callable[[], ProviderRegistry],
) -> None:
    worker = make_worker(
        InMemoryBackend(),
        [plain],
        providers=providers(),
        pg_dsn_direct=DIRECT,
        pg_dsn_pooled=pooled,
    )
    assert await _warnings(worker) == []


def test_an_actor_asking_for_a_loop_scope_connection_counts_too() -> None:
    providers = ProviderRegistry()
    providers.register(asyncpg.Connection, _connect, scope=Scope.TRANSIENT)
    assert loop_scope_connections(providers, [plain]) == []
    assert loop_scope_connections(providers, [plain, asks_loop_connection]) == [
        "asyncpg.connection.Connection"
    ]
