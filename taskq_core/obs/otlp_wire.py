"""Shipped span records written in OTLP's wire form, for the official OTLP span exporters of
the span exporter process (``span_shipping``).

Those exporters encode with ``encode_spans``, which builds a protobuf message for each span,
attribute, value and link out of the SDK's span objects: about 48 us a span counting the SDK
span made for it, the bulk of the exporter process's work and, on a machine with no core to
spare, most of what exporting every job's span costs the drain. ``RequestWriter`` writes the
same request from the records directly (about 6 us a span), reusing an attribute's bytes
while its key and value repeat (the worker's labels, the actor, the queue). The request
reaches the exporter through its module's ``encode_spans``, which ``accept_encoded`` wraps:
records already encoded pass through, anything else goes to the original. The OTLP/HTTP
exporter only serializes its request and posts the bytes, so it is given the written bytes as
they are; the others get them parsed into the official message (C code, yet the parse and the
exporter's serializing again cost about 2.5 us a span, a fifth of the process's work). An
exporter whose module has no ``encode_spans`` is given the SDK's spans, as before.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

# Field keys (number << 3 | wire type) of the messages written here.
_REQUEST_RESOURCE_SPANS = b"\x0a"
_RESOURCE_SPANS_RESOURCE, _RESOURCE_SPANS_SCOPE_SPANS = b"\x0a", b"\x12"
_RESOURCE_ATTRIBUTE = b"\x0a"
_SCOPE_SPANS_SCOPE, _SCOPE_SPANS_SPAN = b"\x0a", b"\x12"
_SCOPE_NAME, _SCOPE_VERSION = b"\x0a", b"\x12"
_SPAN_TRACE_ID, _SPAN_ID, _SPAN_NAME, _SPAN_KIND = b"\x0a\x10", b"\x12\x08", b"\x2a", b"\x30"
_SPAN_START, _SPAN_END, _SPAN_ATTRIBUTE = b"\x39", b"\x41", b"\x4a"
_SPAN_EVENT, _SPAN_LINK, _SPAN_STATUS = b"\x5a", b"\x6a", b"\x7a"
_EVENT_TIME, _EVENT_NAME, _EVENT_ATTRIBUTE = b"\x09", b"\x12", b"\x1a"
_LINK_TRACE_ID, _LINK_SPAN_ID, _LINK_ATTRIBUTE = b"\x0a\x10", b"\x12\x08", b"\x22"
_KEY, _VALUE, _STRING_VALUE = b"\x0a", b"\x12", b"\x0a"
# The flags the official encoder writes: the span's parent (none here) is not remote; a link's
# context is remote. Bits 8 and 9 of OTLP's SpanFlags.
_SPAN_FLAGS = b"\x85\x01" + struct.pack("<I", 0x100)
_LINK_FLAGS = b"\x35" + struct.pack("<I", 0x300)
_NO_STATUS = _SPAN_STATUS + b"\x00"  # UNSET, no message: written, as the encoder writes it

_fixed64 = struct.Struct("<Q").pack
_KEPT_PER_KEY = 256  # an attribute key's values whose bytes are kept for reuse
_KEPT_KEYS = 1024  # attribute keys whose values are kept


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# The lengths of a span's fields and of most spans, written once.
_SHORT = 2048
_SHORT_VARINTS = tuple(_varint(n) for n in range(_SHORT))


def _field(key: bytes, payload: bytes) -> bytes:
    """A length-delimited field: a message, a string or bytes."""
    n = len(payload)
    return key + (_SHORT_VARINTS[n] if n < _SHORT else _varint(n)) + payload


def _value(value: Any) -> AnyValue:
    """The official encoder's value, for what has no shortcut below."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Sequence):
        return AnyValue(array_value=ArrayValue(values=[_value(v) for v in value]))
    raise TypeError(f"an attribute value of type {type(value).__name__}")


class _Attributes:
    """Key-value pairs as ``KeyValue`` fields of a message, the repeated ones from a cache.

    Each key keeps up to ``_KEPT_PER_KEY`` of its values' bytes: a key whose values repeat
    (a label, an actor, a queue) is written once, one whose values do not (a job's id) fills
    its share once and is then written each time without being kept. Up to ``_KEPT_KEYS``
    keys keep values at all.
    """

    def __init__(self) -> None:
        # By type too: True == 1 == 1.0, and each is written as its own kind of value.
        self._kept: dict[tuple[bytes, str, type, Any], bytes] = {}
        self._counts: dict[tuple[bytes, str], int] = {}  # values kept, by field and key

    def fields(self, field: bytes, attributes: Mapping[str, Any]) -> list[bytes]:
        """``attributes`` as the repeated ``KeyValue`` field keyed ``field``."""
        kept = self._kept
        written = []
        for key, value in attributes.items():
            try:
                encoded = kept.get((field, key, type(value), value))
            except TypeError:  # a list: not kept
                written.append(_field(field, _key_value(key, value)))
                continue
            written.append(encoded or self._keep(field, key, value))
        return written

    def _keep(self, field: bytes, key: str, value: Any) -> bytes:
        encoded = _field(field, _key_value(key, value))
        counts = self._counts
        count = counts.get((field, key))
        if count is None:
            if len(counts) >= _KEPT_KEYS:  # past them (names made per job, say): keep nothing
                return encoded
            count = 0
        if count < _KEPT_PER_KEY:
            self._kept[field, key, type(value), value] = encoded
            counts[field, key] = count + 1
        return encoded


def _key_value(key: str, value: Any) -> bytes:
    """A serialized ``KeyValue``; a string's written here, any other value by protobuf."""
    if type(value) is str:
        return _field(_KEY, key.encode()) + _field(_VALUE, _field(_STRING_VALUE, value.encode()))
    written: bytes = KeyValue(key=key, value=_value(value)).SerializeToString()
    return written


class RequestWriter:
    """Writes a batch of span records (``span_shipping.Record``) as one
    ``ExportTraceServiceRequest`` of one resource and one instrumentation scope."""

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str | None]) -> None:
        self._attributes = _Attributes()
        described = b"".join(self._attributes.fields(_RESOURCE_ATTRIBUTE, resource))
        self._resource = _field(_RESOURCE_SPANS_RESOURCE, described)
        name, version = scope
        scope_bytes = _field(_SCOPE_NAME, name.encode()) + (
            _field(_SCOPE_VERSION, version.encode()) if version else b""
        )
        self._scope = _field(_SCOPE_SPANS_SCOPE, scope_bytes)

    def encode(self, batch: Sequence[Any]) -> bytes:
        """The request for ``batch``, serialized."""
        if not batch:
            return b""  # no resource without spans, as the official encoder
        # A link's attributes and flags, and a span's shared attributes, by the mapping's
        # identity: the spans of a batch share a few mappings (unpickled once each), alive
        # while the batch is.
        tails: dict[int, tuple[bytes, bytes]] = {}
        shared: dict[int, bytes] = {}
        spans = b"".join(
            [_field(_SCOPE_SPANS_SPAN, self._span(record, tails, shared)) for record in batch]
        )
        resource_spans = self._resource + _field(_RESOURCE_SPANS_SCOPE_SPANS, self._scope + spans)
        return _field(_REQUEST_RESOURCE_SPANS, resource_spans)

    def _span(
        self, record: Any, tails: dict[int, tuple[bytes, bytes]], shared: dict[int, bytes]
    ) -> bytes:
        (
            name, kind, trace_id, span_id, start, end, common, attributes, links, events, code,
            message,
        ) = record  # fmt: skip
        fields = self._attributes.fields
        common_bytes = shared.get(id(common))
        if common_bytes is None:
            common_bytes = shared[id(common)] = b"".join(fields(_SPAN_ATTRIBUTE, common))
        parts = [
            _SPAN_TRACE_ID, trace_id.to_bytes(16, "big"), _SPAN_ID, span_id.to_bytes(8, "big"),
            _field(_SPAN_NAME, name.encode()), _SPAN_KIND, _varint(kind + 1),  # SpanKind + 1
            _SPAN_START, _fixed64(start), _SPAN_END, _fixed64(end), common_bytes,
            *fields(_SPAN_ATTRIBUTE, attributes),
        ]  # fmt: skip
        for event, timestamp, event_attributes in events:
            written = [_EVENT_TIME, _fixed64(timestamp), _field(_EVENT_NAME, event.encode())]
            written += fields(_EVENT_ATTRIBUTE, event_attributes)
            parts.append(_field(_SPAN_EVENT, b"".join(written)))
        for link_trace, link_span, _flags, link_attributes in links:
            head_tail = tails.get(id(link_attributes))
            if head_tail is None:
                head_tail = tails[id(link_attributes)] = self._link_ends(link_attributes)
            head, tail = head_tail
            parts += (head, link_trace.to_bytes(16, "big"), _LINK_SPAN_ID,
                      link_span.to_bytes(8, "big"), tail)  # fmt: skip
        if code or message:
            status = Status(code=code, message=message).SerializeToString()
            parts.append(_field(_SPAN_STATUS, status))
        else:
            parts.append(_NO_STATUS)
        parts.append(_SPAN_FLAGS)
        return b"".join(parts)

    def _link_ends(self, attributes: Mapping[str, Any]) -> tuple[bytes, bytes]:
        """What a link with ``attributes`` writes before its trace id (the field's key, its
        length and the trace id's key) and after its span id (the attributes, the flags)."""
        tail = b"".join(self._attributes.fields(_LINK_ATTRIBUTE, attributes)) + _LINK_FLAGS
        length = len(_LINK_TRACE_ID) + 16 + len(_LINK_SPAN_ID) + 8 + len(tail)
        return _SPAN_LINK + _varint(length) + _LINK_TRACE_ID, tail


class EncodedSpans:
    """A batch already written, passed to an exporter in place of its spans: the request's
    bytes, parsed into the official message once, for an exporter that needs one."""

    __slots__ = ("_parsed", "count", "written")

    def __init__(self, written: bytes, count: int) -> None:
        self.written = written
        self.count = count
        self._parsed: ExportTraceServiceRequest | None = None

    def __len__(self) -> int:
        return self.count

    def message(self) -> ExportTraceServiceRequest:
        """The request as the official message."""
        if self._parsed is None:
            self._parsed = ExportTraceServiceRequest.FromString(self.written)
        return self._parsed


class SerializedRequest:
    """The request the OTLP/HTTP exporter is given: serializing it, all that exporter does with
    one, returns the written bytes; anything else a later version might ask of it goes to the
    parsed message."""

    __slots__ = ("_spans",)

    def __init__(self, spans: EncodedSpans) -> None:
        self._spans = spans

    def SerializePartialToString(self, **_options: Any) -> bytes:  # protobuf's name
        return self._spans.written

    SerializeToString = SerializePartialToString

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spans.message(), name)


# The exporter modules whose exporter only serializes the request and sends the bytes.
_SENDS_BYTES = frozenset({"opentelemetry.exporter.otlp.proto.http.trace_exporter"})


def accept_encoded(exporter: Any) -> bool:
    """Let ``exporter`` take ``EncodedSpans``: wrap the ``encode_spans`` its module calls, once.
    False when the module has none (the exporter is then given the SDK's spans)."""
    module = sys.modules.get(type(exporter).__module__)
    original = getattr(module, "encode_spans", None)
    if module is None or original is None:
        return False
    if getattr(original, "passes_encoded", False):
        return True
    sends_bytes = module.__name__ in _SENDS_BYTES

    def encode_spans(spans: Any) -> Any:
        if isinstance(spans, EncodedSpans):
            return SerializedRequest(spans) if sends_bytes else spans.message()
        return original(spans)

    passing: Callable[[Any], Any] = encode_spans
    passing.passes_encoded = True  # type: ignore[attr-defined]
    module.encode_spans = passing  # type: ignore[attr-defined]
    return True
