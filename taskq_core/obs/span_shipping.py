"""The worker's CONSUMER and DISPATCH spans recorded as plain tuples and exported from a process
of their own (``span_export``).

The SDK makes a span in about 37 us on the event loop (attribute checks, links, processors) and
its OTLP exporter encodes it in about 31 us more on a thread that holds the interpreter's lock:
a worker exporting every job's span drained at a third of its rate. When ``taskq worker``
installed the tracer provider itself (``telemetry.build_telemetry``), the span of each job is a
``ShippedSpan`` instead: the API's ``Span`` (the body can read it, annotate it, parent its own
spans on it), recorded as a tuple when it ends. The tuples go in batches
(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, or every OTEL_BSP_SCHEDULE_DELAY) to one exporter process,
which hands them to the exporters OTEL_TRACES_EXPORTER names, configured from the same
variables: to the OTLP ones as a request it wrote itself (``otlp_wire``), to others as the
SDK's spans. Sampling is the provider's sampler, asked as the SDK asks it. As the SDK's batch
processor does, a batch that finds OTEL_BSP_MAX_QUEUE_SIZE spans already waiting is dropped
(and counted). The exporter process ends with the worker: at
shutdown after the last batch, and on its own when the worker died (``kill -9``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import os
import queue
import random
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_ON,
    ParentBased,
    ParentBasedTraceIdRatio,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

from taskq_core.obs.logs import get_logger
from taskq_core.obs.span_export import CarriedLink, Record, export_all, link_of

# The SDK's batch span processor's variables and defaults, read the same way.
_BATCH_SIZE = ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
_QUEUE_SIZE = ("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
_SCHEDULE_DELAY = ("OTEL_BSP_SCHEDULE_DELAY", 5000)  # milliseconds
_ALWAYS_ON = (ALWAYS_ON, DEFAULT_ON)  # a new trace's span is sampled: no need to ask
_PARENT_BASED = (ParentBased, ParentBasedTraceIdRatio)  # exactly these: a subclass may differ
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)
_UNSET: tuple[int, str | None] = (StatusCode.UNSET.value, None)  # a span's status to begin with
_OK = StatusCode.OK.value

_SCALARS = (str, bool, int, float, bytes)
# A new trace's root span: trace id, span id, sampled (None: the sampler is to be asked).
Root = tuple[int, int, bool | None]
_NOTHING_SHARED: Mapping[str, Any] = {}  # never changed (a record must pickle: no proxy)


def _carried(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes whose values OTLP carries (scalars, or sequences of them); the SDK
    drops the others with a warning, and so they are dropped here, silently (the exporter
    process checks nothing more)."""
    return {
        key: value
        for key, value in attributes.items()
        if isinstance(value, _SCALARS)
        or (isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value))
    }


def _deciding_root(sampler: Any) -> Any:
    """The sampler that decides a new trace's root span: a parent-based sampler (the SDK's
    default, and ``parentbased_*``) hands a span without a parent to its root sampler."""
    while type(sampler) in _PARENT_BASED:
        root = getattr(sampler, "_root", None)  # where the SDK keeps it (not its API)
        if root is None:
            break  # kept elsewhere by another version: the sampler is asked, as before
        sampler = root
    return sampler


def _setting(environ: Mapping[str, str], variable: tuple[str, int]) -> int:
    """A positive integer variable; its default when unset or not one (as the SDK does)."""
    name, default = variable
    try:
        value = int(environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class ShippedSpan(trace.Span):
    """A recording span whose end hands one tuple to the shipper. Its attributes are
    ``shared`` (a mapping many spans carry, never changed here) and its own; setting a shared
    key copies the shared ones into its own first."""

    __slots__ = (
        "_attributes", "_context", "_ended", "_events", "_kind", "_links", "_name", "_shared",
        "_shipper", "_start", "_status",
    )  # fmt: skip

    def __init__(
        self,
        shipper: SpanShipper,
        name: str,
        kind: SpanKind,
        context: SpanContext,
        attributes: dict[str, Any],
        links: list[CarriedLink],
        start: int | None = None,
        shared: Mapping[str, Any] = _NOTHING_SHARED,
    ) -> None:
        self._shipper = shipper
        self._name = name
        self._kind = kind.value
        self._context = context
        self._start = start or time.time_ns()
        self._shared = shared
        self._attributes = attributes
        self._links = links
        self._events: list[tuple[str, int, Mapping[str, Any]]] = []
        self._status: tuple[int, str | None] = _UNSET
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if type(value) in _SCALARS:  # the usual value: no check more
            if not self._ended:
                if key in self._shared:
                    self._unshare()
                self._attributes[key] = value
            return
        self.set_attributes({key: value})

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if not self._ended:
            if not self._shared.keys().isdisjoint(attributes):
                self._unshare()
            self._attributes.update(_carried(attributes))

    def _unshare(self) -> None:
        """Make the shared attributes this span's own (one of them is about to change)."""
        self._attributes = {**self._shared, **self._attributes}
        self._shared = _NOTHING_SHARED

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if not self._ended:
            self._events.append((name, timestamp or time.time_ns(), _carried(attributes or {})))

    def update_name(self, name: str) -> None:
        if not self._ended:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._ended or self._status[0] == _OK:  # OK is final, as in the SDK
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        self._status = (code.value, description if code is StatusCode.ERROR else None)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.add_event(
            "exception",
            {
                "exception.type": type(exception).__qualname__,
                "exception.message": str(exception),
                "exception.stacktrace": "".join(traceback.format_exception(exception)),
                "exception.escaped": escaped,
                **(attributes or {}),
            },
            timestamp,
        )

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        context = self._context
        self._shipper.ship(
            (
                self._name, self._kind, context.trace_id, context.span_id, self._start,
                end_time or time.time_ns(), self._shared, self._attributes, self._links,
                self._events, *self._status,
            )
        )  # fmt: skip


class CurrentSpan:
    """``trace.use_span(span, end_on_exit=True)`` as a plain class: a job pays for one
    generator-based context manager fewer (about a microsecond each)."""

    __slots__ = ("_token", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def __enter__(self) -> trace.Span:
        self._token = context_api.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        context_api.detach(self._token)
        span = self.span
        # As use_span: an Exception (not a cancellation or an exit) marks the span.
        if isinstance(error, Exception) and span.is_recording():
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()


class SpanShipper:
    """Batches ended spans' records to the exporter process (see the module docstring).

    The event loop only appends to a list; full batches (and, every OTEL_BSP_SCHEDULE_DELAY,
    what there is) go to a sender thread, which starts the exporter process at once and
    writes each to its pipe. Spans waiting for the sender count against
    OTEL_BSP_MAX_QUEUE_SIZE.
    """

    def __init__(
        self,
        provider: trace.TracerProvider,
        exporters: Sequence[str],
        resource: Mapping[str, Any],
        scope: tuple[str, str | None],
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.provider = provider  # the spans are shipped only while it is the global one
        sampler = _deciding_root(getattr(provider, "sampler", None))
        # None: every span sampled. The ratio sampler's rule is applied here, as it applies
        # it, and the never-sampler's answer (a root span: no parent to ask); any other
        # sampler is asked.
        self._sampler = None if sampler is None or sampler in _ALWAYS_ON else sampler
        self._ratio_bound = sampler.bound if type(sampler) is TraceIdRatioBased else None
        self._never = sampler is ALWAYS_OFF
        ids = getattr(provider, "id_generator", None)
        self._ids = None if ids is None or type(ids) is RandomIdGenerator else ids  # None: random
        self._exporting = (list(exporters), dict(resource), scope)
        self.batch_size = _setting(environ, _BATCH_SIZE)
        self.queue_size = max(_setting(environ, _QUEUE_SIZE), self.batch_size)
        self.delay = _setting(environ, _SCHEDULE_DELAY) / 1000
        self.dropped = 0  # spans dropped for a full queue
        self._lock = threading.Lock()
        self._buffer: list[Record] = []
        self._queued = 0  # spans handed to the sender, not written to the pipe yet
        self._batches: queue.SimpleQueue[list[Record] | None] = queue.SimpleQueue()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._closed = threading.Event()
        self._sender = threading.Thread(target=self._send_all, name="taskq-spans", daemon=True)
        self._sender.start()
        self._ticker = threading.Thread(target=self._tick, name="taskq-spans-tick", daemon=True)
        self._ticker.start()

    # --- the event loop's side ----------------------------------------------------------
    def span(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: list[CarriedLink],
        shared: Mapping[str, Any] = _NOTHING_SHARED,
        root: Root | None = None,
    ) -> CurrentSpan:
        """A span of a new trace, current while its ``with`` block runs (as
        ``start_as_current_span``) with ``shared`` and ``attributes`` (no key in both);
        ``links`` as the record carries them (no SDK ``Link`` object a job unless a sampler
        of the application's asks to see them). ``root``: its ids and decision, drawn by
        ``new_root`` (else drawn here)."""
        root = root or self.new_root()
        context, sampled = self._new_trace(name, kind, attributes, links, shared, root)
        if not sampled:
            return CurrentSpan(trace.NonRecordingSpan(context))
        if root[2] is None and not shared.keys().isdisjoint(attributes):  # the sampler's own
            attributes, shared = {**shared, **attributes}, _NOTHING_SHARED
        return CurrentSpan(ShippedSpan(self, name, kind, context, attributes, links, shared=shared))

    def ended(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        start: int,
        error: BaseException | None = None,
    ) -> SpanContext:
        """A span of a new trace that began at ``start`` (ns) and ends now, shipped when
        sampled (as the SDK's ``start_span`` then ``end``); ``error`` marks it failed."""
        context, sampled = self._new_trace(name, kind, attributes, [])
        if sampled:
            span = ShippedSpan(self, name, kind, context, attributes, [], start)
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
        return context

    def new_root(self) -> Root:
        """Fresh ids of a new trace's root span and whether it is sampled; None when the
        provider's sampler must see the span's name, attributes and links first (one of the
        application's). A ratio sampler's rule is applied here, as it applies it, and the
        never-sampler's answer (a root span: no parent to ask)."""
        ids = self._ids
        if ids is None:  # as the SDK's RandomIdGenerator, without its two calls
            trace_id, span_id = random.getrandbits(128) or 1, random.getrandbits(64) or 1
        else:
            trace_id, span_id = ids.generate_trace_id(), ids.generate_span_id()
        if self._sampler is None:
            return trace_id, span_id, True
        if self._never:
            return trace_id, span_id, False
        if self._ratio_bound is not None:
            bound = self._ratio_bound
            return trace_id, span_id, trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound
        return trace_id, span_id, None

    def not_sampled(self, root: Root) -> CurrentSpan:
        """The current span of a root ``new_root`` decided not to sample: nothing recorded,
        its context current for what the body starts."""
        context = SpanContext(root[0], root[1], False, trace_flags=_UNSAMPLED)
        return CurrentSpan(trace.NonRecordingSpan(context))

    # The parameters of ``span``, which hands them on (``ended`` gives neither shared
    # attributes nor a root).
    def _new_trace(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: list[CarriedLink],
        shared: Mapping[str, Any] = _NOTHING_SHARED,
        root: Root | None = None,
    ) -> tuple[SpanContext, bool]:
        """The context of a new trace's root span (``root``, else drawn), and whether it is
        sampled, as the provider's sampler decides (shown every attribute; its own added to
        ``attributes``)."""
        trace_id, span_id, sampled = root or self.new_root()
        if sampled is None and self._sampler is not None:  # None: only with a sampler to ask
            shown = {**shared, **attributes} if shared else attributes
            decision = self._sampler.should_sample(
                None, trace_id, name, kind, shown, [link_of(carried) for carried in links]
            )
            sampled = decision.decision.is_sampled()
            if sampled and decision.attributes:
                attributes.update(decision.attributes)
        flags = _SAMPLED if sampled else _UNSAMPLED
        return SpanContext(trace_id, span_id, False, trace_flags=flags), bool(sampled)

    def ship(self, record: Record) -> None:
        """Queue one ended span's record; a full batch goes to the sender at once."""
        with self._lock:
            self._buffer.append(record)
            if len(self._buffer) < self.batch_size:
                return
            batch, self._buffer = self._buffer, []
            self._hand_over(batch)

    def _hand_over(self, batch: list[Record]) -> None:
        """Give a batch to the sender, or drop it when the queue is full (lock held)."""
        if self._closed.is_set() or self._queued + len(batch) > self.queue_size:
            before, self.dropped = self.dropped, self.dropped + len(batch)
            if before == 0 or before // 10_000 != self.dropped // 10_000:
                get_logger("telemetry").warning(
                    "spans_dropped",
                    dropped=self.dropped,
                    note="the span exporter is behind or gone; the jobs ran",
                )
            return
        self._queued += len(batch)
        self._batches.put(batch)

    # --- the threads ----------------------------------------------------------------------
    def _tick(self) -> None:
        while not self._closed.wait(self.delay):
            with self._lock:
                if self._buffer:
                    batch, self._buffer = self._buffer, []
                    self._hand_over(batch)

    def _send_all(self) -> None:
        """Start the exporter process (its imports take about half a second of a core: not
        during the first burst of jobs), then write each batch to it; a None ends."""
        writer: Any = None
        if self._exporting[0]:
            try:
                writer = self._start()
            except Exception as exc:  # the first batch tries again
                get_logger("telemetry").warning(
                    "span_exporter_start_failed", error=f"{type(exc).__name__}: {exc}"
                )
        while (batch := self._batches.get()) is not None:
            with self._lock:
                self._queued -= len(batch)
            try:
                if writer is None:
                    writer = self._start()
                writer.send(batch)
            except Exception as exc:  # a dead process: the next batch starts another
                get_logger("telemetry").warning(
                    "span_export_failed", spans=len(batch), error=f"{type(exc).__name__}: {exc}"
                )
                if isinstance(exc, OSError):
                    writer = None
        if writer is not None:
            writer.close()  # the exporter process reads to the end and exits

    def _start(self) -> Any:
        context = multiprocessing.get_context("spawn")
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=export_all,
            args=(reader, os.getpid(), *self._exporting),
            name="taskq-span-exporter",
            daemon=True,  # ended at the worker's exit if it did not end by then
        )
        process.start()
        reader.close()
        self._process = process
        return writer

    def close(self, timeout: float) -> None:
        """Send what is buffered, wait up to ``timeout`` seconds for the exporter process to
        export it and end, then end it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            batch, self._buffer = self._buffer, []
            if batch:
                self._hand_over(batch)
            self._closed.set()
        self._batches.put(None)
        self._sender.join(timeout)
        process = self._process
        if process is not None:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
