"""OpenTelemetry: the tracer, the meter and every instrument TaskQ records, in one place.

TaskQ only uses the OpenTelemetry API; the application (or the test) installs an SDK
provider and exporter. Without one, every call is a cheap no-op. Spans follow the messaging
conventions: ``send <queue>`` (PRODUCER) at enqueue stores its trace and span ids on the job;
``process <actor>`` (CONSUMER) is linked to it, not parented, when the job runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

INSTRUMENTATION = "taskq"


@dataclass(frozen=True)
class Instruments:
    """The metric instruments (names are part of the operator contract: keep them stable)."""

    dispatch_duration: Any
    process_duration: Any
    consumed_messages: Any
    backpressure_errors: Any
    cancellation_requested: Any
    watchdog_trips: Any


@cache
def instruments() -> Instruments:
    """Create the instruments once, on the global meter provider."""
    meter = metrics.get_meter(INSTRUMENTATION)
    return Instruments(
        dispatch_duration=meter.create_histogram(
            "taskq.dispatch.duration", unit="s", description="dispatch_batch latency"
        ),
        process_duration=meter.create_histogram(
            "messaging.process.duration", unit="s", description="actor execution duration"
        ),
        consumed_messages=meter.create_counter(
            "messaging.client.consumed.messages", description="jobs finished, by outcome"
        ),
        backpressure_errors=meter.create_counter(
            "taskq.backpressure.errors", description="enqueues refused by max_pending"
        ),
        cancellation_requested=meter.create_counter(
            "taskq.cancellation.requested", description="cancel requests made by clients"
        ),
        watchdog_trips=meter.create_counter(
            "taskq.worker.watchdog_trips_total", description="watchdog force-exits"
        ),
    )


def sdk_installed() -> bool:
    """Whether the application installed a tracer or meter provider.

    The API's default providers are proxies that record nothing; the worker's hot path skips
    span and instrument calls entirely until a real provider is set (checked per call, so a
    provider installed after start is honoured).
    """
    return not (
        isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        and type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    )


def tracer() -> trace.Tracer:
    """The TaskQ tracer from the global provider."""
    return trace.get_tracer(INSTRUMENTATION)


@contextmanager
def producer_span(queue: str, actor: str) -> Iterator[tuple[str | None, str | None]]:
    """Span for one enqueue; yields the (trace_id, span_id) hex strings to store on the job."""
    with tracer().start_as_current_span(
        f"send {queue}",
        kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "taskq", "messaging.destination.name": queue,
                    "taskq.actor": actor},
    ) as span:  # fmt: skip
        context = span.get_span_context()
        if context.is_valid:
            yield format(context.trace_id, "032x"), format(context.span_id, "016x")
        else:
            yield None, None


@contextmanager
def consumer_span(
    actor: str, queue: str, job_id: str, trace_id: str | None, span_id: str | None
) -> Iterator[trace.Span]:
    """Span for one job execution, linked to the span that enqueued it."""
    links = []
    if trace_id and span_id:
        try:
            linked = SpanContext(
                int(trace_id, 16), int(span_id, 16), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )  # fmt: skip
            links.append(Link(linked))
        except ValueError:
            pass  # ids written by something else: no link rather than no span
    with tracer().start_as_current_span(
        f"process {actor}",
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={"messaging.system": "taskq", "messaging.destination.name": queue,
                    "messaging.message.id": job_id, "taskq.actor": actor},
    ) as span:  # fmt: skip
        yield span
