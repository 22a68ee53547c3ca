"""Shipped span records written in OTLP's wire form, for the official OTLP span exporters of
the span exporter process (``span_shipping``).

Those exporters encode with ``encode_spans``, which builds a protobuf message for each span,
attribute, value and link out of the SDK's span objects: about 48 us a span counting the SDK
span made for it, the bulk of the exporter process's work and, on a machine with no core to
spare, most of what exporting every job's span costs the drain. ``RequestWriter`` writes the
same request from the records directly (about 6 us a span), reusing an attribute's bytes
while its key and value repeat (the worker's labels, the actor, the queue). The request is
parsed into the official message (C code, about a microsecond a span) and reaches the exporter
through its module's ``encode_spans``, which ``accept_encoded`` wraps: records already encoded
pass through, anything else goes to the original. An exporter whose module has no
``encode_spans`` is given the SDK's spans, as before.
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
_FULL: dict[tuple[type, Any], bytes] = {}  # keeps nothing: see _Attributes.fields


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(key: bytes, payload: bytes) -> bytes:
    """A length-delimited field: a message, a string or bytes."""
    return key + _varint(len(payload)) + payload


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
        self._seen: dict[tuple[bytes, str], dict[tuple[type, Any], bytes]] = {}

    def fields(self, field: bytes, attributes: Mapping[str, Any]) -> list[bytes]:
        """``attributes`` as the repeated ``KeyValue`` field keyed ``field``."""
        seen = self._seen
        written = []
        for key, value in attributes.items():
            values = seen.get((field, key))
            if values is None:
                if len(seen) < _KEPT_KEYS:
                    values = seen[field, key] = {}
                else:  # past _KEPT_KEYS keys (names made per job, say), keep nothing new
                    values = _FULL
            try:
                written.append(values[type(value), value])
                continue
            except KeyError:
                encoded = _field(field, _key_value(key, value))
            except TypeError:  # a list: not kept
                written.append(_field(field, _key_value(key, value)))
                continue
            if len(values) < _KEPT_PER_KEY and values is not _FULL:
                values[type(value), value] = encoded
            written.append(encoded)
        return written


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

    def request(self, batch: Sequence[Any]) -> ExportTraceServiceRequest:
        parsed: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(self.encode(batch))
        return parsed

    def encode(self, batch: Sequence[Any]) -> bytes:
        if not batch:
            return b""  # no resource without spans, as the official encoder
        spans = b"".join([_field(_SCOPE_SPANS_SPAN, self._span(record)) for record in batch])
        resource_spans = self._resource + _field(_RESOURCE_SPANS_SCOPE_SPANS, self._scope + spans)
        return _field(_REQUEST_RESOURCE_SPANS, resource_spans)

    def _span(self, record: Any) -> bytes:
        name, kind, trace_id, span_id, start, end, attributes, links, events, code, message = record
        fields = self._attributes.fields
        parts = [
            _SPAN_TRACE_ID, trace_id.to_bytes(16, "big"), _SPAN_ID, span_id.to_bytes(8, "big"),
            _field(_SPAN_NAME, name.encode()), _SPAN_KIND, _varint(kind + 1),  # SpanKind + 1
            _SPAN_START, _fixed64(start), _SPAN_END, _fixed64(end),
            *fields(_SPAN_ATTRIBUTE, attributes),
        ]  # fmt: skip
        for event, timestamp, event_attributes in events:
            written = [_EVENT_TIME, _fixed64(timestamp), _field(_EVENT_NAME, event.encode())]
            written += fields(_EVENT_ATTRIBUTE, event_attributes)
            parts.append(_field(_SPAN_EVENT, b"".join(written)))
        for link_trace, link_span, _flags, link_attributes in links:
            written = [
                _LINK_TRACE_ID, link_trace.to_bytes(16, "big"),
                _LINK_SPAN_ID, link_span.to_bytes(8, "big"),
                *fields(_LINK_ATTRIBUTE, link_attributes), _LINK_FLAGS,
            ]  # fmt: skip
            parts.append(_field(_SPAN_LINK, b"".join(written)))
        if code or message:
            status = Status(code=code, message=message).SerializeToString()
            parts.append(_field(_SPAN_STATUS, status))
        else:
            parts.append(_NO_STATUS)
        parts.append(_SPAN_FLAGS)
        return b"".join(parts)


class EncodedSpans:
    """A batch already encoded, passed to an exporter in place of its spans."""

    __slots__ = ("count", "request")

    def __init__(self, request: ExportTraceServiceRequest, count: int) -> None:
        self.request = request
        self.count = count

    def __len__(self) -> int:
        return self.count


def accept_encoded(exporter: Any) -> bool:
    """Let ``exporter`` take ``EncodedSpans``: wrap the ``encode_spans`` its module calls, once.
    False when the module has none (the exporter is then given the SDK's spans)."""
    module = sys.modules.get(type(exporter).__module__)
    original = getattr(module, "encode_spans", None)
    if original is None:
        return False
    if getattr(original, "passes_encoded", False):
        return True

    def encode_spans(spans: Any) -> ExportTraceServiceRequest:
        if isinstance(spans, EncodedSpans):
            return spans.request
        encoded: ExportTraceServiceRequest = original(spans)
        return encoded

    passing: Callable[[Any], ExportTraceServiceRequest] = encode_spans
    passing.passes_encoded = True  # type: ignore[attr-defined]
    module.encode_spans = passing  # type: ignore[union-attr]
    return True
