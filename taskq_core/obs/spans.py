"""OpenTelemetry spans: PRODUCER at enqueue, DISPATCH around a claim, CONSUMER per job.

    send <queue>      (PRODUCER)  enqueue; its trace and span ids are stored on the job row
    dispatch          (INTERNAL)  one dispatch_batch call that claimed jobs
    process <actor>   (CONSUMER)  one job's execution, linked (not parented) to both above

The consumer span starts a trace of its own and links to the enqueue and to the claim, as
the messaging conventions draw a consumer that is causally related to, but not part of,
its producer's trace. Spans are made only while a tracer provider is installed
(``tracing_installed``); the worker checks once per dispatch, not per job. When ``taskq
worker`` installed the provider itself, the CONSUMER and DISPATCH spans are recorded without
the SDK and exported from a process of its own (``span_shipping``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from taskq_core.obs.metrics import INSTRUMENTATION, SYSTEM
from taskq_core.obs.span_export import CarriedLink

if TYPE_CHECKING:  # the shipper imports the SDK: only a worker that traces needs it
    from taskq_core.obs.span_shipping import SpanShipper

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_ENQUEUE_LINK = {"taskq.link": "enqueue"}
_DISPATCH_LINK = {"taskq.link": "dispatch"}
_PROCESSING_KEPT = 1024  # (actor, queue) pairs whose span name and attributes are kept
_NEW_TRACE = Context()  # no parent: a claim and a job each start a trace of their own


_shipper: SpanShipper | None = None  # set when taskq worker installed the provider itself


def ship_worker_spans(shipper: SpanShipper | None) -> None:
    """Make CONSUMER and DISPATCH spans through ``shipper`` while its provider is the global
    one."""
    global _shipper
    _shipper = shipper


def tracing_installed() -> bool:
    """Whether an SDK tracer provider is installed (the default proxy records nothing)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


# The tracer of the provider it came from: the SDK's get_tracer builds a new Tracer (and its
# instrumentation scope) on every call, about 9 us a job on the worker's hot path.
_cached: tuple[trace.TracerProvider, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """The TaskQ tracer from the global provider (made again when the provider changes)."""
    global _cached
    provider = trace.get_tracer_provider()
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    made = provider.get_tracer(INSTRUMENTATION)
    if not isinstance(provider, trace.ProxyTracerProvider):  # a proxy's tracer follows it
        _cached = (provider, made)
    return made


@dataclass(frozen=True)
class SpanLabels:
    """What a worker puts on every span it makes: TASKQ_WORKER_GROUP (the consumer group)
    and TASKQ_ENVIRONMENT, when set."""

    worker_group: str
    environment: str | None = None
    attributes: Mapping[str, str] = field(init=False)
    # A job span's name and the attributes every job of an actor and queue shares, by
    # (actor, queue): made once, carried by every such span as one mapping.
    _processing: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.consumer.group.name": self.worker_group,
        }
        if self.environment:
            attributes["deployment.environment.name"] = self.environment
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "_processing", {})

    def processing(self, actor: str, queue: str) -> tuple[str, Mapping[str, Any]]:
        """The name of a job span of ``actor`` on ``queue``, and the attributes it shares
        with every other (never to be changed)."""
        made = self._processing.get((actor, queue))
        if made is None:
            shared = {**self.attributes, "messaging.destination.name": queue,
                      "messaging.operation.type": "process", "taskq.actor": actor}  # fmt: skip
            made = (f"process {actor}", shared)
            if len(self._processing) < _PROCESSING_KEPT:  # names of unknown actors: not kept
                self._processing[actor, queue] = made
        return made


@contextmanager
def producer_span(queue: str, actor: str) -> Iterator[tuple[str | None, str | None]]:
    """Span for one enqueue; yields the (trace_id, span_id) hex strings to store on the job."""
    with tracer().start_as_current_span(
        f"send {queue}",
        kind=SpanKind.PRODUCER,
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": queue,
                    "messaging.operation.type": "send", "taskq.actor": actor},
    ) as span:  # fmt: skip
        context = span.get_span_context()
        if context.is_valid:
            yield format(context.trace_id, "032x"), format(context.span_id, "016x")
        else:
            yield None, None


class DispatchSpan:
    """The DISPATCH span of one claim: its start is taken before the dispatch statement and
    the span is made when it returns, only for a claim that got jobs or failed. An idle
    worker polls every few seconds; a span per empty poll would bury the claims that matter.
    """

    def __init__(self, labels: SpanLabels, queues: Sequence[str], requested: int) -> None:
        self._labels = labels
        self._queues = tuple(queues)
        self._requested = requested
        self._start = time.time_ns()

    def finish(self, claimed: int, error: BaseException | None = None) -> SpanContext | None:
        """End the span (when there is one to keep); its context is what the claimed jobs'
        CONSUMER spans link to."""
        if not claimed and error is None:
            return None
        attributes: dict[str, Any] = {
            **self._labels.attributes,
            "messaging.operation.type": "receive",
            "taskq.dispatch.queues": self._queues,
            "taskq.dispatch.requested": self._requested,
            "messaging.batch.message_count": claimed,
        }
        shipper = _shipper
        if shipper is not None and trace.get_tracer_provider() is shipper.provider:
            return shipper.ended("dispatch", SpanKind.INTERNAL, attributes, self._start, error)
        span = tracer().start_span(
            "dispatch",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            context=_NEW_TRACE,
            start_time=self._start,
        )
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()
        context = span.get_span_context()
        return context if context.is_valid else None


def _enqueue_ids(trace_id: str | None, span_id: str | None) -> tuple[int, int] | None:
    """The enqueue span's ids stored on the job, as numbers (None: none, or not ids)."""
    if not (trace_id and span_id):
        return None
    try:
        return int(trace_id, 16), int(span_id, 16)
    except ValueError:
        return None  # ids written by something else: no link rather than no span


def consumer_span(
    labels: SpanLabels,
    actor: str,
    queue: str,
    job_id: str,
    attempt: int,
    trace_id: str | None,
    span_id: str | None,
    dispatch: SpanContext | None = None,
) -> AbstractContextManager[trace.Span]:
    """Span for one job execution, linked to the span that enqueued it and to the dispatch
    that claimed it; current while its ``with`` block runs."""
    shipper = _shipper
    if shipper is not None and trace.get_tracer_provider() is not shipper.provider:
        shipper = None  # the application installed another provider since
    if shipper is not None:
        root = shipper.new_root()
        if root[2] is False:  # decided on the trace id alone: no attribute or link made
            return shipper.not_sampled(root)
    name, shared = labels.processing(actor, queue)
    own: dict[str, Any] = {"messaging.message.id": job_id, "taskq.attempt": attempt}
    enqueue = _enqueue_ids(trace_id, span_id)
    if shipper is not None:
        carried: list[CarriedLink] = []
        if enqueue is not None:
            carried.append((*enqueue, TraceFlags.SAMPLED, _ENQUEUE_LINK))
        if dispatch is not None:
            carried.append((dispatch.trace_id, dispatch.span_id, dispatch.trace_flags,
                            _DISPATCH_LINK))  # fmt: skip
        return shipper.span(name, SpanKind.CONSUMER, own, carried, shared, root)
    attributes = {**shared, **own}
    links = []
    if enqueue is not None:
        context = SpanContext(*enqueue, True, trace_flags=_SAMPLED)
        links.append(Link(context, _ENQUEUE_LINK))
    if dispatch is not None:
        links.append(Link(dispatch, _DISPATCH_LINK))
    return tracer().start_as_current_span(
        name, context=_NEW_TRACE, kind=SpanKind.CONSUMER, links=links, attributes=attributes
    )
