"""Dependency injection for actors: providers, four scopes, startup validation, LIFO teardown.

Scopes nest PROCESS (widest) > THREAD > LOOP > TRANSIENT (one actor invocation). A provider
may depend on providers of its own or a wider scope, never a narrower one. A factory's own
parameters are resolved the same way, by their annotations. Generator factories (sync or
async) yield the value; the code after ``yield`` is the teardown, run in LIFO order when the
scope closes, every teardown running even when an earlier one fails.

An actor parameter annotated ``Annotated[T, Scope.X]`` caches ``T`` in scope X instead of the
provider's registered scope.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from taskq_core.errors import ConfigError
from taskq_core.obs.logs import get_logger

_log = get_logger("di")


class Scope(IntEnum):
    """How long a provided value lives; lower is wider."""

    PROCESS = 0
    THREAD = 1
    LOOP = 2
    TRANSIENT = 3


class DependencyError(ConfigError):
    """The provider graph cannot satisfy the actors (raised at worker start)."""


class MissingProviderError(DependencyError):
    """A parameter's type has no provider."""


class ScopeViolationError(DependencyError):
    """A wider-scoped provider depends on a narrower-scoped one."""


class DependencyCycleError(DependencyError):
    """Providers depend on each other in a loop."""


@dataclass(frozen=True)
class Provider:
    """How to make a value of ``key``: a factory (or a fixed value) and its scope."""

    key: Any
    factory: Callable[..., Any] | None
    value: Any
    scope: Scope

    def dependencies(self) -> dict[str, Any]:
        """The factory's parameters by name -> annotated type."""
        if self.factory is None:
            return {}
        return _parameter_types(self.factory)


def _parameter_types(fn: Callable[..., Any]) -> dict[str, Any]:
    target = fn.__init__ if inspect.isclass(fn) else fn  # type: ignore[misc]
    hints = get_type_hints(target, include_extras=True)
    params = inspect.signature(fn).parameters.values()
    return {
        p.name: hints.get(p.name, p.annotation)
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }


def split_annotation(annotation: Any) -> tuple[Any, Scope | None]:
    """``Annotated[T, Scope.X]`` -> (T, Scope.X); anything else -> (annotation, None)."""
    if get_origin(annotation) is Annotated:
        base, *extras = get_args(annotation)
        scopes = [e for e in extras if isinstance(e, Scope)]
        return base, (scopes[0] if scopes else None)
    return annotation, None


class ProviderRegistry:
    """Providers by type, validated once at worker start."""

    def __init__(self) -> None:
        self._providers: dict[Any, Provider] = {}

    def register(
        self, key: Any, factory: Callable[..., Any], *, scope: Scope = Scope.TRANSIENT
    ) -> None:
        """Provide ``key`` by calling ``factory`` (sync/async function, class or generator)."""
        self._providers[key] = Provider(key, factory, None, scope)

    def register_value(self, key: Any, value: Any) -> None:
        """Provide ``key`` as a fixed value (process scope)."""
        self._providers[key] = Provider(key, None, value, Scope.PROCESS)

    def get(self, key: Any) -> Provider | None:
        """The provider of ``key``, if any."""
        return self._providers.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._providers

    def validate(self, requirements: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Check every (owner, {param: annotation}) can be satisfied: missing providers,
        scope violations and cycles are raised as DependencyError naming the culprit."""
        for owner, params in requirements:
            for param, annotation in params.items():
                key, _ = split_annotation(annotation)
                if key not in self._providers:
                    raise MissingProviderError(
                        f"{owner}: no provider for parameter {param!r} ({_name(key)})"
                    )
        for provider in self._providers.values():
            self._check_provider(provider, [])

    def _check_provider(self, provider: Provider, path: list[Any]) -> None:
        if provider.key in path:
            cycle = " -> ".join(_name(k) for k in [*path, provider.key])
            raise DependencyCycleError(f"dependency cycle: {cycle}")
        for param, annotation in provider.dependencies().items():
            key, _ = split_annotation(annotation)
            dependency = self._providers.get(key)
            if dependency is None:
                raise MissingProviderError(
                    f"provider of {_name(provider.key)}: no provider for {param!r} ({_name(key)})"
                )
            if dependency.scope > provider.scope:
                raise ScopeViolationError(
                    f"{_name(provider.key)} ({provider.scope.name}) cannot depend on "
                    f"{_name(key)} ({dependency.scope.name}): a wider scope must not depend "
                    "on a narrower one"
                )
            self._check_provider(dependency, [*path, provider.key])


def _name(key: Any) -> str:
    return getattr(key, "__name__", repr(key))


class ScopeContainer:
    """Values of one scope instance, and the teardowns to run when it closes."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._values: dict[Any, Any] = {}
        self._teardowns: list[Any] = []  # generators, finished in LIFO order on close
        self._lock = asyncio.Lock()

    async def get_or_create(self, provider: Provider, resolve: Resolver) -> Any:
        """The cached value, or a new one made by the provider (teardown registered)."""
        if provider.key in self._values:
            return self._values[provider.key]
        async with self._lock:
            if provider.key not in self._values:
                self._values[provider.key] = await self._make(provider, resolve)
        return self._values[provider.key]

    async def _make(self, provider: Provider, resolve: Resolver) -> Any:
        if provider.factory is None:
            return provider.value
        kwargs = {
            name: await resolve(annotation) for name, annotation in provider.dependencies().items()
        }
        made = provider.factory(**kwargs)
        if inspect.isasyncgen(made):
            value = await made.__anext__()
            self._teardowns.append(made)
            return value
        if inspect.isgenerator(made):
            value = next(made)
            self._teardowns.append(made)
            return value
        if inspect.isawaitable(made):
            return await made
        return made

    async def close(self) -> None:
        """Run teardowns LIFO; each runs even if an earlier one fails (failures are logged)."""
        teardowns, self._teardowns = self._teardowns, []
        self._values.clear()
        cancelled: BaseException | None = None
        for gen in reversed(teardowns):
            try:
                await _finish(gen)
            except asyncio.CancelledError as exc:
                cancelled = exc
            except Exception as exc:
                _log.error("di_teardown_failed", scope=self.scope.name, error=repr(exc))
        if cancelled is not None:
            raise cancelled


async def _finish(gen: Any) -> None:
    """Resume a generator provider past its ``yield`` so its teardown code runs."""
    if inspect.isasyncgen(gen):
        try:
            await gen.__anext__()
        except StopAsyncIteration:
            return
        await gen.aclose()
        raise RuntimeError("an async generator provider must yield exactly once")
    try:
        next(gen)
    except StopIteration:
        return
    gen.close()
    raise RuntimeError("a generator provider must yield exactly once")


class Resolver:
    """Resolves annotated types against a registry and the open scope containers."""

    def __init__(self, registry: ProviderRegistry, containers: dict[Scope, ScopeContainer]):
        self._registry = registry
        self._containers = containers

    async def __call__(self, annotation: Any) -> Any:
        key, override = split_annotation(annotation)
        provider = self._registry.get(key)
        if provider is None:
            raise MissingProviderError(f"no provider for {_name(key)}")
        return await self._containers[override or provider.scope].get_or_create(provider, self)


class ProcessScopes:
    """The long-lived PROCESS, THREAD and LOOP containers of one worker."""

    def __init__(self, registry: ProviderRegistry) -> None:
        self.registry = registry
        self._process = ScopeContainer(Scope.PROCESS)
        self._threads: dict[int, ScopeContainer] = {}
        self._loop = ScopeContainer(Scope.LOOP)
        self._threads_lock = threading.Lock()

    def containers(self, transient: ScopeContainer) -> dict[Scope, ScopeContainer]:
        """The scope chain for one invocation."""
        ident = threading.get_ident()
        with self._threads_lock:
            thread = self._threads.setdefault(ident, ScopeContainer(Scope.THREAD))
        return {
            Scope.PROCESS: self._process,
            Scope.THREAD: thread,
            Scope.LOOP: self._loop,
            Scope.TRANSIENT: transient,
        }

    async def close(self) -> None:
        """Close narrow to wide: LOOP, THREAD, then PROCESS."""
        await self._loop.close()
        for container in list(self._threads.values()):
            await container.close()
        await self._process.close()


@asynccontextmanager
async def actor_scope(
    scopes: ProcessScopes, dependencies: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """Resolve an actor's DI kwargs in a fresh TRANSIENT scope; teardown is shielded."""
    if not dependencies:
        yield {}
        return
    transient = ScopeContainer(Scope.TRANSIENT)
    resolver = Resolver(scopes.registry, scopes.containers(transient))
    try:
        yield {name: await resolver(annotation) for name, annotation in dependencies.items()}
    finally:
        await asyncio.shield(transient.close())
