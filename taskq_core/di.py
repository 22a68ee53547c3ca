"""Dependency injection for actors: providers, four scopes, startup validation, LIFO teardown.

Scopes nest PROCESS (widest) > THREAD > LOOP > TRANSIENT (one actor invocation). A provider
may depend on providers of its own or a wider scope, never a narrower one. A factory's own
parameters are resolved the same way, by their annotations. Generator factories (sync or
async) yield the value; the code after ``yield`` is the teardown, run in LIFO order when the
scope closes, every teardown running even when an earlier one fails.

An actor parameter annotated ``Annotated[T, Scope.X]`` caches ``T`` in scope X instead of the
provider's registered scope.

THREAD means the thread that runs the actor: a plain ``def`` actor's executor thread (the
worker lends it to the resolver as a ThreadSeat, and that thread calls the factory), or the
event loop's thread for an ``async def`` actor.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, Protocol, get_args, get_origin, get_type_hints

from taskq_core.errors import ConfigError
from taskq_core.obs.logs import get_logger

_log = get_logger("di")


# A plain enum, alike worker/active.py's CancelPhase by shape only (other members).
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

    def keys(self, scope: Scope | None = None) -> list[Any]:
        """The provided keys; only those registered in ``scope`` when it is given."""
        return [k for k, p in self._providers.items() if scope is None or p.scope == scope]

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


Call = Callable[[Callable[[], Any]], Awaitable[Any]]  # runs a sync callable somewhere


async def _call_here(fn: Callable[[], Any]) -> Any:
    """Run a factory step on the current (event loop) thread."""
    return fn()


class ThreadSeat(Protocol):
    """An executor thread held for one actor run while its dependencies resolve."""

    @property
    def ident(self) -> int:
        """``threading.get_ident()`` of the held thread."""
        ...

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the held thread and return its result."""
        ...


class ScopeContainer:
    """Values of one scope instance, and the teardowns to run when it closes."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._values: dict[Any, Any] = {}
        self._teardowns: list[Any] = []  # generators, finished in LIFO order on close
        self._lock = asyncio.Lock()

    async def get_or_create(
        self, provider: Provider, resolve: Resolver, call: Call = _call_here
    ) -> Any:
        """The cached value, or a new one made by the provider (teardown registered).

        ``call`` runs the factory's synchronous steps: on the loop, or on a held thread.
        """
        if provider.key in self._values:
            return self._values[provider.key]
        async with self._lock:
            if provider.key not in self._values:
                self._values[provider.key] = await self._make(provider, resolve, call)
        return self._values[provider.key]

    async def _make(self, provider: Provider, resolve: Resolver, call: Call) -> Any:
        if provider.factory is None:
            return provider.value
        kwargs = {
            name: await resolve(annotation) for name, annotation in provider.dependencies().items()
        }
        made = await call(functools.partial(provider.factory, **kwargs))
        if inspect.isasyncgen(made):
            value = await made.__anext__()
            self._teardowns.append(made)
            return value
        if inspect.isgenerator(made):
            value = await call(functools.partial(next, made))
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

    # Alike worker/runtime.py's Worker constructor by shape only: typed parameters.
    def __init__(
        self,
        registry: ProviderRegistry,
        containers: dict[Scope, ScopeContainer],
        thread: ThreadSeat | None = None,
    ) -> None:
        self._registry = registry
        self._containers = containers
        self._thread_call: Call = _call_here if thread is None else thread.call

    async def __call__(self, annotation: Any) -> Any:
        key, override = split_annotation(annotation)
        provider = self._registry.get(key)
        if provider is None:
            raise MissingProviderError(f"no provider for {_name(key)}")
        scope = override or provider.scope
        # A THREAD value is made by the thread it belongs to (thread-bound resources).
        call = self._thread_call if scope is Scope.THREAD else _call_here
        return await self._containers[scope].get_or_create(provider, self, call)


class ProcessScopes:
    """The long-lived PROCESS, THREAD (one per actor thread) and LOOP containers of a worker."""

    def __init__(self, registry: ProviderRegistry) -> None:
        self.registry = registry
        self._process = ScopeContainer(Scope.PROCESS)
        self._threads: dict[int, ScopeContainer] = {}
        self._loop = ScopeContainer(Scope.LOOP)
        self._threads_lock = threading.Lock()
        self._uses_thread: dict[tuple[tuple[str, Any], ...], bool] = {}

    def containers(
        self, transient: ScopeContainer, thread: int | None = None
    ) -> dict[Scope, ScopeContainer]:
        """The scope chain for one invocation on thread ``thread`` (default: this thread)."""
        ident = threading.get_ident() if thread is None else thread
        with self._threads_lock:
            container = self._threads.get(ident)
            if container is None:
                container = self._threads[ident] = ScopeContainer(Scope.THREAD)
        return {
            Scope.PROCESS: self._process,
            Scope.THREAD: container,
            Scope.LOOP: self._loop,
            Scope.TRANSIENT: transient,
        }

    def uses_thread_scope(self, dependencies: dict[str, Any]) -> bool:
        """Whether resolving ``dependencies`` reaches a THREAD-scoped value (then a plain
        ``def`` actor's thread must be held before they resolve)."""
        memo_key = tuple(dependencies.items())
        known = self._uses_thread.get(memo_key)
        if known is None:
            known = self._uses_thread[memo_key] = any(
                self._reaches_thread(annotation, set()) for annotation in dependencies.values()
            )
        return known

    def _reaches_thread(self, annotation: Any, seen: set[Any]) -> bool:
        key, override = split_annotation(annotation)
        provider = self.registry.get(key)
        if provider is None:
            return False
        if (override or provider.scope) is Scope.THREAD:
            return True
        if key in seen:
            return False
        seen.add(key)
        return any(self._reaches_thread(a, seen) for a in provider.dependencies().values())

    async def close(self) -> None:
        """Close narrow to wide: LOOP, THREAD, then PROCESS.

        THREAD teardowns run here, on the loop's thread, once the actor threads are idle.
        """
        await self._loop.close()
        for container in list(self._threads.values()):
            await container.close()
        await self._process.close()


@asynccontextmanager
async def actor_scope(
    scopes: ProcessScopes, dependencies: dict[str, Any], thread: ThreadSeat | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Resolve an actor's DI kwargs in a fresh TRANSIENT scope; teardown is shielded.

    ``thread`` is the held thread a plain ``def`` actor will run on: THREAD-scoped values are
    that thread's own. Without it, THREAD means the calling (event loop) thread.
    """
    if not dependencies:
        yield {}
        return
    transient = ScopeContainer(Scope.TRANSIENT)
    ident = None if thread is None else thread.ident
    resolver = Resolver(scopes.registry, scopes.containers(transient, ident), thread)
    try:
        yield {name: await resolver(annotation) for name, annotation in dependencies.items()}
    finally:
        await asyncio.shield(transient.close())
