"""The span exporter process of a worker (``span_shipping``): it reads the worker's batches
of span records from its pipe and hands them to the exporters OTEL_TRACES_EXPORTER names, to
the OTLP ones as a request written from the records (``otlp_wire``), to others as the SDK's
spans. It ignores SIGINT and SIGTERM (the worker's shutdown ends it, after the last spans) and
ends on its own when the worker is gone."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from taskq_core.constants import GC_YOUNG_THRESHOLD
from taskq_core.obs.logs import get_logger

_PARENT_CHECK = 1.0  # seconds between the exporter process's checks that the worker lives
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

# One span as it travels: name, kind, trace id, span id, start and end (ns since the epoch),
# the attributes it shares with other spans (one mapping for every job of an actor and queue:
# pickled and written once a batch) and its own (no key in both), links as (trace id, span
# id, flags, attributes), events as (name, ns, attributes), status code and description.
CarriedLink = tuple[int, int, int, Mapping[str, Any]]
Record = tuple[
    str,
    int,
    int,
    int,
    int,
    int,
    Mapping[str, Any],
    dict[str, Any],
    list[CarriedLink],
    list[tuple[str, int, Mapping[str, Any]]],
    int,
    str | None,
]


def export_all(
    reader: Any,
    worker_pid: int,
    exporters: Sequence[str],
    resource: Mapping[str, Any],
    scope: tuple[str, str | None],
) -> None:
    """The exporter process: export each batch read until the pipe ends (the worker closed it
    at shutdown, or died), then shut the exporters down."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from taskq_core.obs.exporters import span_exporter
    from taskq_core.obs.otlp_wire import EncodedSpans, RequestWriter, accept_encoded

    # A terminal's Ctrl-C or a group's SIGTERM reaches this process too: the worker's shutdown
    # ends it (the end of the pipe), after the last spans.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watch_worker, args=(worker_pid,), daemon=True).start()
    made = [span_exporter(name, os.environ) for name in exporters]
    encoded = [accept_encoded(exporter) for exporter in made]
    described = Resource(dict(resource))
    instrumentation = InstrumentationScope(*scope)
    writer = RequestWriter(resource, scope)
    # A batch unpickles into thousands of short-lived containers: the youngest generation
    # collected every few spans at the default threshold, and the SDK and protobuf's objects
    # walked by the older ones (about a microsecond a span). As the worker's own process
    # (worker/collector.py).
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    while True:
        try:
            batch = reader.recv()
        except EOFError:
            break
        request: EncodedSpans | None = None
        spans: list[Any] | None = None
        for exporter, takes_encoded in zip(made, encoded, strict=True):
            try:
                if takes_encoded:
                    if request is None:
                        request = EncodedSpans(writer.encode(batch), len(batch))
                    exporter.export(request)  # type: ignore[arg-type]  # its encode_spans takes it
                else:
                    if spans is None:
                        spans = readable_spans(batch, described, instrumentation)
                    exporter.export(spans)
            except Exception as exc:  # one batch lost, not the exporter
                get_logger("telemetry").warning(
                    "span_export_failed", spans=len(batch), error=f"{type(exc).__name__}: {exc}"
                )
    for exporter in made:
        exporter.shutdown()


def _watch_worker(worker_pid: int) -> None:
    """End this process once the worker that started it is gone (killed: no end of pipe
    reaches a process whose parent vanished while it was blocked elsewhere)."""
    while os.getppid() == worker_pid:
        time.sleep(_PARENT_CHECK)
    os._exit(0)


def link_of(carried: CarriedLink) -> Link:
    """The API's link of a carried one (its context remote: another trace's span)."""
    trace_id, span_id, flags, attributes = carried
    return Link(SpanContext(trace_id, span_id, True, trace_flags=TraceFlags(flags)), attributes)


def readable_spans(batch: list[Record], resource: Any, scope: Any) -> list[Any]:
    """The SDK's spans for a batch of records. Their attributes are passed as they are: the
    worker set them (or checked them, ``_carried``), so the SDK's checks would find nothing
    and cost this process about a fifth of its time per span."""
    from opentelemetry.sdk.trace import Event, ReadableSpan

    return [
        ReadableSpan(
            name=name,
            context=SpanContext(trace_id, span_id, False, trace_flags=_SAMPLED),
            parent=None,
            resource=resource,
            attributes={**shared, **attributes} if shared else attributes,
            events=[Event(event, attrs, ts) for event, ts, attrs in events],
            links=[link_of(carried) for carried in links],
            kind=SpanKind(kind),
            status=Status(StatusCode(code), description),
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
        )
        for (
            name, kind, trace_id, span_id, start, end, shared, attributes, links, events, code,
            description,
        ) in batch
    ]  # fmt: skip
