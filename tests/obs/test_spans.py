"""One job, enqueued by a client and run by a worker, on both backends: the PRODUCER,
DISPATCH and CONSUMER spans linked as the seeds draw them, and the job's metrics with their
attributes; and what gates them: spans need a tracer provider, metrics a meter provider, and
TASKQ_OTEL_ENABLED=false turns both off, gauges included."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import Backend
from taskq_core.client import JobsClient
from taskq_core.obs.spans import DispatchSpan, SpanLabels
from taskq_core.worker.runtime import Worker
from tests.backend_pair import KINDS, open_backend
from tests.obs.otel_sdk import Sdk, install, uninstall


@actor(name="traced", queue="media")
async def traced(payload: dict[str, Any]) -> str:
    return "ok"


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


async def test_one_job_makes_producer_dispatch_and_consumer_spans_linked_as_drawn(
    backend: Backend, sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(traced, {})
    worker = make_worker(
        backend, [traced], queues=["media"], worker_group="thumbnails", environment="staging"
    )
    assert await worker.run() == 0

    send, dispatch, process = (
        sdk.span("send media"),
        sdk.span("dispatch"),
        sdk.span("process traced"),
    )
    assert (send.kind, dispatch.kind, process.kind) == (
        SpanKind.PRODUCER,
        SpanKind.INTERNAL,
        SpanKind.CONSUMER,
    )
    # The job row carries the enqueue's span; the consumer links to it and to its claim.
    assert (job.trace_id, job.span_id) == (
        format(send.context.trace_id, "032x"),
        format(send.context.span_id, "016x"),
    )
    links = {link.attributes["taskq.link"]: link.context for link in process.links}  # type: ignore[index]
    assert links["enqueue"].span_id == send.context.span_id
    assert links["dispatch"].span_id == dispatch.context.span_id
    # Linked, not parented: each starts a trace of its own.
    assert process.parent is None and dispatch.parent is None
    assert len({send.context.trace_id, dispatch.context.trace_id, process.context.trace_id}) == 3

    assert dict(process.attributes or {}) == {
        "messaging.system": "taskq",
        "messaging.consumer.group.name": "thumbnails",
        "deployment.environment.name": "staging",
        "messaging.destination.name": "media",
        "messaging.operation.type": "process",
        "messaging.message.id": str(job.id),
        "taskq.actor": "traced",
        "taskq.attempt": 1,
        "taskq.outcome": "succeeded",
    }
    attributes = dict(dispatch.attributes or {})
    assert attributes["taskq.dispatch.queues"] == ("media",)
    assert attributes["taskq.dispatch.requested"] >= 1  # type: ignore[operator]
    assert attributes["messaging.batch.message_count"] == 1
    assert attributes["messaging.consumer.group.name"] == "thumbnails"
    assert dispatch.start_time is not None and dispatch.end_time is not None
    assert dispatch.start_time <= dispatch.end_time <= process.start_time  # type: ignore[operator]

    job_labels = dict(
        messaging__system="taskq",
        messaging__destination__name="media",
        messaging__consumer__group__name="thumbnails",
        taskq__actor="traced",
        taskq__outcome="succeeded",
    )
    assert sdk.value("messaging.client.consumed.messages", **job_labels) == 1
    assert sdk.value("messaging.process.duration", **job_labels) == 1
    assert sdk.value("messaging.client.sent.messages", messaging__destination__name="media",
                     taskq__actor="traced") == 1  # fmt: skip
    assert sdk.value("taskq.dispatch.jobs", messaging__destination__name="media") == 1
    assert sdk.value("taskq.dispatch.duration", messaging__consumer__group__name="thumbnails") >= 1


async def test_an_idle_poll_makes_no_dispatch_span(
    sdk: Sdk, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(InMemoryBackend(), [traced], queues=["media"])
    assert await worker.run() == 0  # nothing to do: it polled, claimed nothing, and exited
    assert [s.name for s in sdk.spans()] == []
    assert sdk.value("taskq.dispatch.duration") >= 1  # the polls are still timed


def test_a_failed_dispatch_makes_an_error_span(sdk: Sdk) -> None:
    span = DispatchSpan(SpanLabels("default"), ["default"], 8)
    assert span.finish(0, ConnectionResetError("gone")) is not None
    [made] = sdk.spans()
    assert made.status.status_code is StatusCode.ERROR
    assert [event.name for event in made.events] == ["exception"]


def test_spans_go_to_the_provider_installed_now(sdk: Sdk) -> None:
    # The tracer is kept per provider: one installed later gets the next span, not the first.
    DispatchSpan(SpanLabels("default"), ["default"], 8).finish(1)
    later = install()
    try:
        DispatchSpan(SpanLabels("default"), ["default"], 8).finish(1)
        assert len(later.spans()) == 1
    finally:
        uninstall()
    assert len(sdk.spans()) == 1


# --- what gates them -------------------------------------------------------------------


async def test_without_a_tracer_provider_jobs_make_no_span_but_are_counted(
    meters_only: Sdk, make_worker: Callable[..., Worker]
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(traced, {})
    assert job.trace_id is None  # no tracer provider: no enqueue span to link to
    worker = make_worker(backend, [traced], queues=["media"])
    assert await worker.run() == 0
    assert worker.deps is not None and not worker.deps.state.telemetry
    assert meters_only.value("messaging.client.consumed.messages", taskq__actor="traced") == 1


async def test_otel_disabled_records_nothing(sdk: Sdk, make_worker: Callable[..., Worker]) -> None:
    seen_while_running: list[Any] = []

    @actor(name="looks")
    async def looks(payload: dict[str, Any]) -> None:
        seen_while_running.extend(sdk.points("taskq.active_jobs"))

    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        await client.enqueue(looks, {})
    worker = make_worker(backend, [looks], otel_enabled=False)
    assert await worker.run() == 0
    assert seen_while_running == []  # the gauges never watched this worker
    assert [s.name for s in sdk.spans() if s.name != "send default"] == []
    for name in (
        "messaging.client.consumed.messages",
        "taskq.dispatch.duration",
        "taskq.maintenance_leader.elected",
        "taskq.heartbeat.duration",
    ):
        assert sdk.points(name) == [], name  # fmt: skip
