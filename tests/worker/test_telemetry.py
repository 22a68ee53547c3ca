"""Spans and metrics reach an OpenTelemetry SDK when the application installs one."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.worker.runtime import Worker


@cache
def sdk() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """Install SDK providers once per process (the global providers cannot be replaced)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


@actor(name="traced")
async def traced(payload: dict[str, Any]) -> str:
    return "ok"


async def test_consumer_span_links_to_the_enqueue_span_and_metrics_count_outcomes(
    make_worker: Callable[..., Worker],
) -> None:
    exporter, reader = sdk()
    exporter.clear()
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(traced, {})
    assert job.trace_id and job.span_id
    assert await make_worker(backend, [traced]).run() == 0

    spans = {s.name: s for s in exporter.get_finished_spans()}
    send, process = spans["send default"], spans["process traced"]
    assert process.kind is trace.SpanKind.CONSUMER
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.attributes is not None and process.attributes["taskq.outcome"] == "succeeded"

    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: metric.data.data_points
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    consumed = [
        p for p in points["messaging.client.consumed.messages"]
        if p.attributes.get("taskq.actor") == "traced"
    ]  # fmt: skip
    assert sum(p.value for p in consumed) == 1
    assert "taskq.dispatch.duration" in points
