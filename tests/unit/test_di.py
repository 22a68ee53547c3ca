from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
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
