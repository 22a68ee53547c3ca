"""Dependency injection: startup validation, scope caching, LIFO teardown, per-thread values."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

import pytest

from taskq_core.di import (
    DependencyCycleError,
    MissingProviderError,
    ProcessScopes,
    ProviderRegistry,
    Scope,
    ScopeViolationError,
    actor_scope,
)
from taskq_core.worker.actor_thread import ActorThread


class Config:
    pass


class Db:
    def __init__(self, config: Config) -> None:
        self.config = config


class Session:
    pass


class A:
    pass


class B:
    pass


def make_a(b: B) -> A:
    return A()


def make_b(a: A) -> B:
    return B()


def test_cycles_are_reported_with_the_path() -> None:
    registry = ProviderRegistry()
    registry.register(A, make_a)
    registry.register(B, make_b)
    with pytest.raises(DependencyCycleError, match=r"A -> B -> A|B -> A -> B"):
        registry.validate([])


def test_missing_provider_names_the_actor_and_parameter() -> None:
    with pytest.raises(MissingProviderError, match="actor send: no provider for parameter 'db'"):
        ProviderRegistry().validate([("actor send", {"db": Db})])


def test_process_scope_may_not_depend_on_transient() -> None:
    registry = ProviderRegistry()
    registry.register(Session, Session, scope=Scope.TRANSIENT)

    def db_from_session(session: Session) -> Db:
        return Db(Config())

    registry.register(Db, db_from_session, scope=Scope.PROCESS)
    with pytest.raises(ScopeViolationError, match=r"Db \(PROCESS\) cannot depend on Session"):
        registry.validate([])


async def test_scopes_cache_and_teardown_runs_lifo_even_after_a_failure() -> None:
    events: list[str] = []

    def config() -> Iterator[Config]:
        yield Config()
        events.append("config closed")

    async def session() -> AsyncIterator[Session]:
        yield Session()
        events.append("session closed")

    def failing_db(config: Config) -> Iterator[Db]:
        yield Db(config)
        raise RuntimeError("teardown failed")

    registry = ProviderRegistry()
    registry.register(Config, config, scope=Scope.PROCESS)
    registry.register(Db, failing_db, scope=Scope.TRANSIENT)
    registry.register(Session, session, scope=Scope.TRANSIENT)
    registry.validate([("actor", {"db": Db, "s": Session})])
    scopes = ProcessScopes(registry)
    async with actor_scope(scopes, {"db": Db, "s": Session}) as first:
        assert isinstance(first["db"], Db) and isinstance(first["s"], Session)
    assert events == ["session closed"]  # db's teardown raised, session's still ran
    async with actor_scope(scopes, {"db": Db}) as second:
        assert second["db"].config is first["db"].config  # PROCESS value cached
    await scopes.close()
    assert events == ["session closed", "config closed"]


async def test_annotated_scope_override_caches_in_the_wider_scope() -> None:
    registry = ProviderRegistry()
    registry.register(Session, Session, scope=Scope.TRANSIENT)
    scopes = ProcessScopes(registry)
    params = {"s": Annotated[Session, Scope.LOOP]}
    async with actor_scope(scopes, params) as one, actor_scope(scopes, params) as two:
        assert one["s"] is two["s"]
    async with actor_scope(scopes, {"s": Session}) as three:
        assert three["s"] is not one["s"]
    await scopes.close()


class Conn:
    """A thread-bound value: it remembers the thread that made it."""

    def __init__(self) -> None:
        self.made_on = threading.get_ident()


class Repo:
    def __init__(self, conn: Conn) -> None:
        self.conn = conn


async def _resolve_on_a_held_thread(
    scopes: ProcessScopes, executor: ThreadPoolExecutor, gate: threading.Barrier
) -> tuple[int, Repo]:
    """What the consumer does for a plain ``def`` actor: hold a thread, then resolve."""
    loop = asyncio.get_running_loop()
    seat = ActorThread(loop)
    thread = loop.run_in_executor(executor, seat.serve)
    try:
        ident = await seat.claimed()
        async with actor_scope(scopes, {"repo": Repo}, seat) as kwargs:
            seat.run(gate.wait)  # hold the thread until all are resolved
            await thread
            return ident, kwargs["repo"]
    finally:
        seat.release()


async def test_thread_scope_gives_each_held_thread_its_own_instance() -> None:
    registry = ProviderRegistry()
    registry.register(Conn, Conn, scope=Scope.THREAD)
    registry.register(Repo, Repo)  # TRANSIENT, built on the thread's own Conn
    scopes = ProcessScopes(registry)
    assert scopes.uses_thread_scope({"repo": Repo})
    assert not scopes.uses_thread_scope({"s": Session})
    with ThreadPoolExecutor(max_workers=3) as executor:
        gate = threading.Barrier(3, timeout=10)  # three at once: three distinct threads
        first = await asyncio.gather(
            *(_resolve_on_a_held_thread(scopes, executor, gate) for _ in range(3))
        )
        gate = threading.Barrier(3, timeout=10)
        again = await asyncio.gather(
            *(_resolve_on_a_held_thread(scopes, executor, gate) for _ in range(3))
        )
    conn_of = {ident: repo.conn for ident, repo in first}
    assert len(conn_of) == 3 and len({id(c) for c in conn_of.values()}) == 3
    assert all(conn.made_on == ident for ident, conn in conn_of.items())  # made there
    assert all(repo.conn is conn_of[ident] for ident, repo in again)  # and reused there
    async with actor_scope(scopes, {"repo": Repo}) as on_loop:  # an async actor's thread
        assert on_loop["repo"].conn.made_on == threading.get_ident()
        assert on_loop["repo"].conn not in conn_of.values()
    await scopes.close()
