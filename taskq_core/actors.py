"""Actors: the ``@actor`` decorator, ActorRef, JobContext and registry loading (``MOD:ATTR``).

An actor is an async function (or a plain ``def``, run in a thread) whose first parameter is
the payload, validated by its pydantic model when annotated with one. A parameter annotated
``JobContext`` (or named ``ctx``) receives the job's context; any other parameter is resolved
by the DI engine.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Protocol,
    TypeVar,
    get_args,
    get_origin,
    get_type_hints,
)
from uuid import UUID

from pydantic import BaseModel, ValidationError

from taskq_core.constants import DEFAULT_QUEUE
from taskq_core.errors import ConfigError, PayloadValidationError
from taskq_core.progress import check_progress
from taskq_core.ratelimit.primitives import check_declarations
from taskq_core.retry import DEFAULT_RETRY_POLICY, RetryPolicy

if TYPE_CHECKING:  # the protocol package is not needed to declare an actor
    from taskq_core.backend.protocol.schedules import ScheduleSpec
    from taskq_core.backend.protocol.workflows import Upstream

P = TypeVar("P")


class ProgressSink(Protocol):
    """Where a JobContext's progress reports go (the worker's ``JobProgress``)."""

    def report(self, current: float, total: float | None, message: str | None) -> None:
        """A checked report, made on the event loop's thread."""

    def report_threadsafe(self, current: float, total: float | None, message: str | None) -> None:
        """A checked report, made on any thread."""


class RunningWorkflow(Protocol):
    """``ctx.workflow`` as an actor sees it (``workflows.WorkflowHandle``): the workflow's
    ``id`` and ``add``, which takes ``Workflow.add``'s arguments and adds the step at once."""

    id: UUID

    async def add(self, actor: Any, payload: Any = None, **options: Any) -> Any:
        """Add a step to the running workflow; its handle."""


@dataclass
class JobContext(Generic[P]):
    """What an actor knows about the job it runs.

    ``cancel_event`` is set when the job is cancelled or the worker shuts down. An actor that
    looks at it and returns early is treated as interrupted: a cancelled job ends
    ``cancelled``, a job interrupted by shutdown goes back to the queue. An actor that never
    looks at it and returns normally has finished its work, and its result is kept.

    ``report_progress`` (``report_progress_sync`` in a plain ``def`` actor) tells readers how
    far the job has got: ``taskq jobs show``, ``taskq top`` and ``JobsClient.watch_progress``.

    In a workflow step, ``upstream`` maps each dependency's step name to its outcome
    (``.status``, ``.result``, ``.error_class``, ``.error_message``) and ``workflow`` is the
    running workflow's handle (``.id``, ``await .add(...)``); outside one, ``{}`` and None.
    """

    job_id: UUID
    attempt: int
    worker_id: UUID
    actor: str
    queue: str
    payload: P
    # Made on first read (most bodies never look): an Event per job was a tenth of the
    # context's cost. ``_cancel_signalled`` is the truth; the event follows it.
    _cancel_event: asyncio.Event | None = field(default=None, repr=False)
    _cancel_signalled: bool = field(default=False, repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)
    cancel_observed: bool = field(default=False, repr=False)
    _open_connection: Callable[[], Awaitable[Any]] | None = field(default=None, repr=False)
    _progress: ProgressSink | None = field(default=None, repr=False)
    # Makes the sink on the first report (most jobs report none: a job pays nothing for it).
    _progress_factory: Callable[[], ProgressSink] | None = field(default=None, repr=False)
    # Wall-clock time the worker let the body start (its last lease check). A process frozen
    # between that check and the body's first line resumes a body that had begun: the chaos
    # ledger dates a body from here, not from its own first line.
    _let_start_at: float | None = field(default=None, repr=False)
    # A workflow step's dependencies by step name (their outcomes and results), read once
    # before the body starts; and the running workflow's handle (None outside one).
    upstream: dict[str, Upstream] = field(default_factory=dict)
    workflow: RunningWorkflow | None = None

    async def report_progress(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report how far the job has got: ``current`` out of ``total`` (when known), with an
        optional ``message``. Cheap enough to call per item: the job's row gets the latest
        report at most every TASKQ_PROGRESS_FLUSH_INTERVAL (and the last one before the job's
        outcome), Redis subscribers every report. Never fails the job for a database or
        Redis error; bad values raise TypeError or ValueError here. Outside a worker it only
        checks its arguments."""
        checked = check_progress(current, total, message)
        if self._progress is None and self._progress_factory is not None:
            self._progress = self._progress_factory()
        if self._progress is not None:
            self._progress.report(*checked)

    def report_progress_sync(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """``report_progress`` for a plain ``def`` actor (callable from any thread)."""
        checked = check_progress(current, total, message)
        if self._progress is not None:
            self._progress.report_threadsafe(*checked)

    async def connection(self) -> Any:
        """A database connection inside the transaction that records this job's success.

        What the actor writes through it commits together with the job's ``succeeded`` row
        and only then: if the actor raises, is cancelled, or the worker lost the job's lease
        (another attempt may be running), everything is rolled back. Use it for writes that
        must happen exactly once. Every call returns the same connection (PostgreSQL: an
        asyncpg connection, whose statements share the worker's command timeout unless
        given ``timeout=``; in-memory: a transaction handle for ``connection=``).
        """
        if self._open_connection is None:
            raise RuntimeError("JobContext.connection() is only available inside a worker")
        return await self._open_connection()

    @property
    def cancel_event(self) -> asyncio.Event:
        """Set when the job should stop; reading it marks the actor as cancel-aware."""
        self.cancel_observed = True
        event = self._cancel_event
        if event is None:
            # Published before the signal is read: a signal_cancel racing from the loop while
            # a plain ``def`` body makes it either sees the event or was seen here.
            event = self._cancel_event = asyncio.Event()
            if self._cancel_signalled:
                event.set()
        return event

    @property
    def cancel_requested(self) -> bool:
        """True once the job should stop: finish up and return."""
        self.cancel_observed = True
        return self._cancel_signalled

    @property
    def interrupted(self) -> bool:
        """The actor saw the cancel signal (so a normal return means it stopped early)."""
        return self.cancel_observed and self._cancel_signalled

    def signal_cancel(self) -> None:
        """Set the cancel event (worker side; does not count as the actor observing it)."""
        self._cancel_signalled = True
        if self._cancel_event is not None:
            self._cancel_event.set()


# Alike protocol/values.py's EnqueueArgs by shape only: defaulted fields, but an actor's
# declaration, not one job's insert.
@dataclass(frozen=True)
class ActorRef:
    """A registered actor: the function plus everything the queue needs to know about it."""

    name: str
    fn: Callable[..., Any]
    queue: str = DEFAULT_QUEUE
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    priority: int = 0
    max_concurrent: int | None = None
    max_pending: int | None = None
    result_ttl: timedelta | None = None
    timeout: timedelta | None = None
    rate_limits: tuple[Any, ...] = ()
    reservations: tuple[Any, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    payload_type: type[BaseModel] | None = None
    payload_param: str | None = None
    context_param: str | None = None
    dependency_params: dict[str, Any] = field(default_factory=dict)
    is_async: bool = True
    # The ``@cron`` schedules stacked on this actor (taskq_core.cron_schedules), in order.
    schedules: tuple[ScheduleSpec, ...] = ()
    # A success leaves no row behind (the worker's ``report_result``, where it applies).
    ephemeral: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        return self.fn(*args, **kwargs)

    def validate_payload(self, payload: Any) -> Any:
        """The payload as the actor takes it; PayloadValidationError names what is wrong."""
        if self.payload_type is None:
            if isinstance(payload, BaseModel):
                return payload.model_dump(mode="json")
            return payload
        if isinstance(payload, self.payload_type):
            return payload
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json")
        try:
            return self.payload_type.model_validate(payload)
        except ValidationError as exc:
            raise PayloadValidationError(
                f"payload rejected by {self.name} ({self.payload_type.__name__}): "
                + describe_validation(exc)
            ) from None

    def dump_payload(self, payload: Any) -> dict[str, Any]:
        """The payload as stored: validated, then JSON-ready."""
        value = self.validate_payload(payload)
        if isinstance(value, BaseModel):
            dumped: dict[str, Any] = value.model_dump(mode="json")
            return dumped
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise PayloadValidationError(
                f"payload for {self.name} must be a JSON object, got {type(value).__name__}"
            )
        return value


def describe_validation(exc: ValidationError) -> str:
    """The first pydantic error as ``field: message``."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "payload"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


def _as_delta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def _is_context_annotation(annotation: Any) -> bool:
    return annotation is JobContext or get_origin(annotation) is JobContext


def _inspect_parameters(
    fn: Callable[..., Any],
) -> tuple[type[BaseModel] | None, str | None, str | None, dict[str, Any]]:
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward refs: fall back to raw annotations
        hints = {}
    params = list(inspect.signature(fn).parameters.values())
    payload_type: type[BaseModel] | None = None
    payload_param: str | None = None
    context_param: str | None = None
    dependencies: dict[str, Any] = {}
    for index, param in enumerate(params):
        annotation = hints.get(param.name, param.annotation)
        if _is_context_annotation(annotation) or (param.name == "ctx" and index > 0):
            context_param = param.name
        elif index == 0:
            payload_param = param.name
            if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
                payload_type = annotation
        elif param.default is inspect.Parameter.empty:
            dependencies[param.name] = annotation
    if context_param is None and payload_type is None and payload_param is not None:
        annotation = hints.get(payload_param)
        if annotation is not None and get_args(annotation) and _is_context_annotation(annotation):
            context_param, payload_param = payload_param, None
    return payload_type, payload_param, context_param, dependencies


def actor(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    retry: RetryPolicy | None = None,
    priority: int = 0,
    max_concurrent: int | None = None,
    max_pending: int | None = None,
    result_ttl: timedelta | float | None = None,
    timeout: timedelta | float | None = None,
    rate_limits: Iterable[Any] = (),
    reservations: Iterable[Any] = (),
    metadata: Mapping[str, Any] | None = None,
    ephemeral: bool = False,
) -> Any:
    """Declare an actor; usable bare (``@actor``) or with options (``@actor(queue=...)``).

    ``ephemeral=True``: a job that succeeds is deleted with its events and attempts instead
    of being kept as ``succeeded`` (its result is dropped; the worker's metrics still count
    it). Jobs of a batch or a workflow, jobs with a unique key, and a success committed in the
    body's own transaction keep their rows."""

    def wrap(func: Callable[..., Any]) -> ActorRef:
        if not callable(func):
            raise TypeError("@actor decorates a function")
        payload_type, payload_param, context_param, deps = _inspect_parameters(func)
        limits, slots = tuple(rate_limits), tuple(reservations)
        check_declarations(name or func.__name__, limits, slots)  # a wrong kind fails here
        return ActorRef(
            name=name or func.__name__,
            fn=func,
            queue=queue,
            retry=retry or DEFAULT_RETRY_POLICY,
            priority=priority,
            max_concurrent=max_concurrent,
            max_pending=max_pending,
            result_ttl=_as_delta(result_ttl),
            timeout=_as_delta(timeout),
            rate_limits=limits,
            reservations=slots,
            metadata=dict(metadata or {}),
            payload_type=payload_type,
            payload_param=payload_param,
            context_param=context_param,
            dependency_params=deps,
            is_async=inspect.iscoroutinefunction(func),
            ephemeral=ephemeral,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


def build_registry(source: object, *, origin: str = "registry") -> dict[str, ActorRef]:
    """A name -> ActorRef mapping from a Mapping or a list/tuple of ActorRef."""
    if isinstance(source, Mapping):
        items = list(source.items())
        registry: dict[str, ActorRef] = {}
        for key, value in items:
            if not isinstance(value, ActorRef):
                kind = type(value).__name__
                raise ConfigError(f"{origin}: entry {key!r} is not an @actor ({kind})")
            registry[value.name] = value
        return registry
    if isinstance(source, list | tuple):
        registry = {}
        for value in source:
            if not isinstance(value, ActorRef):
                raise ConfigError(f"{origin}: {value!r} is not an @actor")
            if value.name in registry and registry[value.name] is not value:
                raise ConfigError(f"{origin}: two actors are named {value.name!r}")
            registry[value.name] = value
        return registry
    raise ConfigError(
        f"{origin} must be a mapping or a list/tuple of actors, not {type(source).__name__} "
        "(generators and other one-shot iterables are not accepted)"
    )


def load_registry(spec: str) -> dict[str, ActorRef]:
    """Import ``module:attribute`` and return its actors; ConfigError says what is wrong."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f"--actors {spec!r}: expected MODULE:ATTRIBUTE, e.g. myapp.actors:registry"
        )
    if os.getcwd() not in sys.path:  # like `python -m`: modules of the current directory load
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--actors {spec!r}: cannot import {module_name!r} ({exc})") from None
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"--actors {spec!r}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    return build_registry(target, origin=f"--actors {spec}")
