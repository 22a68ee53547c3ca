"""Testing an application's jobs without a database server or a worker process.

``inline_client()`` gives a JobsClient over the in-memory backend (the one that passes the
same conformance suite as PostgreSQL), on a clock that moves only when the test moves it:

    async with inline_client(registry=[send_email]) as client:
        await client.enqueue(send_email, {"to": "a@example.com"})
        assert_enqueued(client, send_email, {"to": "a@example.com"})
        counts = await drain(client, [send_email])
        assert counts["succeeded"] == 1

``drain`` runs every due job through a real in-process Worker (the same claim, execute and
settle code as ``taskq worker``) until none is due, jobs the bodies enqueue included, and
returns the counts by outcome. A retry waits for its backoff on the test's clock:
``clock.advance(...)`` and ``drain`` again. ``perform`` calls one actor's body with a real
JobContext, without enqueueing anything. ``assert_enqueued`` / ``refute_enqueued`` look for
waiting jobs (pending or scheduled) by actor, payload and row fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from taskq_core.actors import ActorRef, JobContext
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import JobFilter, JobRow
from taskq_core.client import JobsClient
from taskq_core.clock import Clock, FakeClock
from taskq_core.di import ProcessScopes, ProviderRegistry, actor_scope
from taskq_core.ids import uuid7
from taskq_core.settings import TaskqSettings
from taskq_core.statemachine import JobStatus
from taskq_core.worker.runtime import Worker

__all__ = [
    "FakeClock",
    "assert_enqueued",
    "drain",
    "inline_client",
    "perform",
    "refute_enqueued",
]

# Cadences of the drain's worker: short, since nothing here waits on a network.
_DRAIN_SETTINGS = dict(
    heartbeat_interval=0.05,
    scheduled_wake_interval=0.01,
    sweep_interval=0.05,
    poll_interval=0.01,
    notify_poll_interval=0.01,
    idle_poll_interval=0.01,
    health_enabled=False,
    otel_enabled=False,
)
_WAITING = (JobStatus.PENDING, JobStatus.SCHEDULED)
_DUE_FILTER = JobFilter(status=(JobStatus.PENDING, JobStatus.RUNNING), limit=None)
_CHECK_EVERY = 0.005  # how often the drain looks whether anything is still due (seconds)


@asynccontextmanager
async def inline_client(
    registry: Iterable[ActorRef] = (), *, clock: Clock | None = None
) -> AsyncIterator[JobsClient]:
    """A JobsClient over a fresh in-memory backend. ``clock`` is the backend's (and the
    drain's) clock: a FakeClock starting now unless given, so delays and retries wait until
    the test advances it."""
    backend = InMemoryBackend(clock=clock or FakeClock(datetime.now(UTC)))
    async with JobsClient(backend=backend, registry=registry) as client:
        yield client
    await backend.close()


async def drain(
    client: JobsClient,
    registry: Iterable[ActorRef] | Mapping[str, ActorRef],
    *,
    queues: Iterable[str] | None = None,
    providers: ProviderRegistry | None = None,
) -> dict[str, int]:
    """Run every due job of ``registry``'s queues (or ``queues``) in-process, jobs enqueued
    meanwhile included, until none is due; returns the counts by outcome (``succeeded``,
    ``failed``, ``retried``, ``cancelled``, ``rate_limited``). Jobs scheduled later on the
    client's clock stay where they are."""
    backend = _memory_backend(client)
    actors = dict(registry) if isinstance(registry, Mapping) else {r.name: r for r in registry}
    names = sorted(set(queues) if queues is not None else {r.queue for r in actors.values()})
    settings = TaskqSettings.load(queues=names, **_DRAIN_SETTINGS)
    worker = Worker(
        settings,
        actors,
        backend=backend,
        providers=providers,
        clock=backend.clock,
        install_signal_handlers=False,
    )
    running = asyncio.create_task(worker.run())
    try:
        await _until_nothing_due(worker, backend, names, running)
    finally:
        worker.stop("drained")
        await running
    assert worker.deps is not None
    return dict(vars(worker.deps.state.stats))


async def _until_nothing_due(
    worker: Worker, backend: InMemoryBackend, queues: list[str], running: asyncio.Task[int]
) -> None:
    started = asyncio.ensure_future(worker.started.wait())
    await asyncio.wait({started, running}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        raise RuntimeError(f"the drain's worker ended at start (exit {running.result()})")
    deps = worker.deps
    assert deps is not None
    while True:
        await backend.promote_scheduled_jobs()  # those the test's clock made due
        due = [job for job in backend.jobs_now(_DUE_FILTER) if job.queue in queues]
        if not due and not deps.active.holding() and deps.local_queue.empty():
            return
        if running.done():
            raise RuntimeError(f"the drain's worker ended early (exit {running.result()})")
        await asyncio.sleep(_CHECK_EVERY)


async def perform(
    actor: ActorRef,
    payload: Any = None,
    *,
    attempt: int = 1,
    job_id: UUID | None = None,
    metadata: Mapping[str, Any] | None = None,
    providers: ProviderRegistry | None = None,
) -> Any:
    """Run ``actor``'s body once with a real JobContext and return what it returns (or raise
    what it raises). The payload is validated as an enqueue would; a plain ``def`` body runs
    in a thread, as in a worker; dependencies come from ``providers``."""
    value = actor.validate_payload(payload)
    ctx: JobContext[Any] = JobContext(
        job_id=job_id or uuid7(),
        attempt=attempt,
        worker_id=uuid4(),
        actor=actor.name,
        queue=actor.queue,
        payload=value,
        metadata=dict(metadata or {}),
    )
    scopes = ProcessScopes(providers or ProviderRegistry())
    try:
        async with actor_scope(scopes, actor.dependency_params) as kwargs:
            if actor.payload_param is not None:
                kwargs[actor.payload_param] = value
            if actor.context_param is not None:
                kwargs[actor.context_param] = ctx
            if actor.is_async:
                return await actor.fn(**kwargs)
            return await asyncio.to_thread(actor.fn, **kwargs)
    finally:
        await scopes.close()


def assert_enqueued(
    client: JobsClient, actor: ActorRef | str, payload: Any = None, **fields: Any
) -> JobRow:
    """The newest waiting job (pending or scheduled) of ``actor`` whose payload equals
    ``payload`` (when given) and whose row has ``fields`` (``queue="mail"``,
    ``priority=5``, ...); AssertionError listing what is waiting when there is none."""
    matches, waiting = _waiting(client, actor, payload, fields)
    if not matches:
        raise AssertionError(
            f"no waiting {_name(actor)} job with payload={payload!r} {fields}; waiting: "
            + (", ".join(_describe(row) for row in waiting) or "none")
        )
    return matches[0]


def refute_enqueued(
    client: JobsClient, actor: ActorRef | str, payload: Any = None, **fields: Any
) -> None:
    """AssertionError when a waiting job of ``actor`` matches (see ``assert_enqueued``)."""
    matches, _ = _waiting(client, actor, payload, fields)
    if matches:
        raise AssertionError(
            f"{len(matches)} waiting {_name(actor)} job(s) match: "
            + ", ".join(_describe(row) for row in matches)
        )


def _waiting(
    client: JobsClient, actor: ActorRef | str, payload: Any, fields: Mapping[str, Any]
) -> tuple[list[JobRow], list[JobRow]]:
    rows = _memory_backend(client).jobs_now(
        JobFilter(status=_WAITING, actor=_name(actor), limit=None)
    )
    if payload is not None and isinstance(actor, ActorRef):
        payload = _as_stored(actor, payload)
    matches = [
        row
        for row in rows
        if (payload is None or row.payload == payload)
        and all(getattr(row, key) == value for key, value in fields.items())
    ]
    return matches, rows


def _as_stored(actor: ActorRef, payload: Any) -> Any:
    """A payload as its row holds it (a pydantic model as its JSON document)."""
    value = actor.validate_payload(payload)
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _name(actor: ActorRef | str) -> str:
    return actor if isinstance(actor, str) else actor.name


def _describe(row: JobRow) -> str:
    return f"{row.actor}({row.payload!r}, queue={row.queue!r}, status={row.status.value})"


def _memory_backend(client: JobsClient) -> InMemoryBackend:
    backend = client.backend
    if not isinstance(backend, InMemoryBackend):
        raise TypeError("drain() runs the jobs of an inline_client() (the in-memory backend)")
    return backend
