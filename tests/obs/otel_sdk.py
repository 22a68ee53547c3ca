"""An OpenTelemetry SDK of the test's own: in-memory span exporter and metric reader,
installed as the global providers for one test and removed afterwards.

The API lets a process set its global providers once; like OpenTelemetry's own test
utilities, this resets that guard (and TaskQ's cached instruments and gauges) around each
test, so one test's SDK never receives another's data and tests run in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from taskq_core.obs import gauges
from taskq_core.obs import metrics as taskq_metrics


def reset_globals() -> None:
    """Back to the API's proxy providers, with TaskQ's instruments not yet created."""
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._PROXY_METER_PROVIDER = metrics_internal._ProxyMeterProvider()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()
    taskq_metrics.instruments.cache_clear()
    taskq_metrics.set_job_sink(None)  # a set-up that tallied jobs locally: back to the SDK
    gauges._install.cache_clear()


@dataclass
class Sdk:
    """What the test's SDK received."""

    exporter: InMemorySpanExporter | None
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        """Every finished span."""
        assert self.exporter is not None, "this SDK has no tracer provider"
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        """The one finished span called ``name``."""
        [found] = [s for s in self.spans() if s.name == name]
        return found

    def points(self, name: str) -> list[Any]:
        """The data points of instrument ``name`` now (gauges are read at this call)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def value(self, name: str, **attributes: Any) -> float:
        """The sum (a counter's value, a histogram's count, a gauge's value) of the points
        of ``name`` whose attributes include ``attributes`` (keys with ``__`` for ``.``)."""
        wanted = {key.replace("__", "."): value for key, value in attributes.items()}
        total = 0.0
        for point in self.points(name):
            if wanted.items() <= dict(point.attributes or {}).items():
                total += point.count if hasattr(point, "count") else point.value
        return total


def install(*, traces: bool = True) -> Sdk:
    """Install fresh providers (a tracer provider only when ``traces``)."""
    reset_globals()
    exporter = None
    if traces:
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return Sdk(exporter, reader)


def uninstall() -> None:
    """Shut the providers down and go back to the proxies; every worker the test started
    must have stopped watching its gauges by now (a stopped worker never reports)."""
    assert gauges._workers == [], "a worker still reports in the gauges after its test"
    for provider in (metrics.get_meter_provider(), trace.get_tracer_provider()):
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
    reset_globals()


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """A tracer and a meter provider of this test's own."""
    yield install()
    uninstall()


@pytest.fixture
def meters_only() -> Iterator[Sdk]:
    """A meter provider of this test's own, and no tracer provider."""
    yield install(traces=False)
    uninstall()
