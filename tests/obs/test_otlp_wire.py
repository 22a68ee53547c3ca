"""The span exporter process writes OTLP requests itself (obs/otlp_wire.py): the request is the
one the official encoder makes of the same spans, and the official OTLP exporters, over HTTP
and gRPC, send it to a collector as it is."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, StatusCode

from taskq_core.obs import otlp_wire
from taskq_core.obs.otlp_wire import EncodedSpans, RequestWriter, accept_encoded
from taskq_core.obs.span_export import Record, readable_spans
from tests.obs.collector import attributes, grpc_collector, http_collector

RESOURCE: dict[str, Any] = {
    "service.name": "taskq-worker",
    "service.instance.id": "w-1",
    "host.cpus": 2,
}
SCOPE = ("taskq", None)


# What the spans of one actor and queue share: one mapping, carried by many records.
SHARED: dict[str, Any] = {"messaging.system": "taskq", "taskq.actor": "actor", "taskq.cpus": 2}


def record(n: int, **extra: Any) -> Record:
    """A span record as the worker ships it, with values of every kind OTLP carries; every
    third shares nothing."""
    attrs: dict[str, Any] = {
        "messaging.message.id": f"0190-{n:06d}",
        "taskq.attempt": n % 3 + 1,
        "ratio": 0.5,
        "retried": n % 2 == 0,
        "offset": -n,
        "tags": ["a", "ü"],
        "sizes": [1, 2],
        "raw": b"\x00\xff",
        "empty": "",
        **extra,
    }
    links: list[tuple[int, int, int, Mapping[str, Any]]] = [
        (random.getrandbits(128), random.getrandbits(64), 1, {"taskq.link": "dispatch"})
    ]
    if n % 2:
        links.append((random.getrandbits(128), 7, 0, {}))
    events: list[tuple[str, int, Mapping[str, Any]]] = [
        ("exception", 1_000 + n, {"exception.type": "ValueError", "escaped": False})
    ]
    failed = n % 3 == 0
    return (
        f"process actor_{n % 2}", n % 5, random.getrandbits(128) or 1, random.getrandbits(64) or 1,
        1_700_000_000_000_000_000 + n, 1_700_000_000_000_500_000 + n,
        {} if n % 3 == 2 else SHARED, attrs, links,
        events if failed else [], StatusCode.ERROR.value if failed else 0,
        "ValueError: boom" if failed else None,
    )  # fmt: skip


def official(batch: list[Record], scope: tuple[str, str | None] = SCOPE) -> Any:
    return encode_spans(readable_spans(batch, Resource(RESOURCE), InstrumentationScope(*scope)))


def parsed(writer: RequestWriter, batch: list[Record]) -> ExportTraceServiceRequest:
    """The request ``writer`` writes for ``batch``, as the official message."""
    return ExportTraceServiceRequest.FromString(writer.encode(batch))


def test_the_request_is_the_one_the_official_encoder_makes() -> None:
    writer = RequestWriter(RESOURCE, SCOPE)
    for batch in ([record(n) for n in range(40)], [record(n) for n in range(40, 90)]):
        assert parsed(writer, batch) == official(batch)  # the second with its cache warm
    one = [record(1)]
    versioned = RequestWriter(RESOURCE, ("taskq", "1.2.3"))
    assert parsed(versioned, one) == official(one, ("taskq", "1.2.3"))
    assert parsed(RequestWriter(RESOURCE, SCOPE), []) == official([])


def test_links_that_share_their_attributes_are_written_right() -> None:
    """An unpickled batch's links share a few attribute mappings (the writer keeps their
    bytes by the mapping while it writes the batch)."""
    enqueue: dict[str, Any] = {"taskq.link": "enqueue"}
    batch = [record(n) for n in range(20)]
    for n, span in enumerate(batch):
        links = span[8]
        links[0] = (*links[0][:3], enqueue if n % 3 else {"taskq.link": f"other.{n}"})
    writer = RequestWriter(RESOURCE, SCOPE)
    assert parsed(writer, batch) == official(batch)
    assert parsed(writer, batch[5:]) == official(batch[5:])


def test_spans_that_share_attributes_are_written_right() -> None:
    """The records of one actor and queue carry one mapping of shared attributes (the writer
    keeps its bytes by the mapping while it writes the batch), other actors' others."""
    other: dict[str, Any] = {"messaging.system": "taskq", "taskq.actor": "other"}
    batch = [record(n) for n in range(12)]
    batch[4] = (*batch[4][:6], other, *batch[4][7:])
    batch[9] = (*batch[9][:6], dict(other, **{"taskq.actor": "third"}), *batch[9][7:])
    writer = RequestWriter(RESOURCE, SCOPE)
    assert parsed(writer, batch) == official(batch)
    assert parsed(writer, batch[::-1]) == official(batch[::-1])


def test_equal_values_of_other_types_keep_their_types() -> None:
    """True == 1 == 1.0 in Python; the cache must not write one for another."""
    writer = RequestWriter(RESOURCE, SCOPE)
    batch = [record(n, flag=value) for n, value in enumerate([1, True, 1.0, "1", 1, True])]
    assert parsed(writer, batch) == official(batch)


def test_keys_and_values_past_the_cache_are_written_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(otlp_wire, "_KEPT_PER_KEY", 4)
    monkeypatch.setattr(otlp_wire, "_KEPT_KEYS", 16)
    writer = RequestWriter(RESOURCE, SCOPE)
    batch = [record(n) for n in range(12)]  # twelve message ids, four kept
    assert parsed(writer, batch) == official(batch)
    assert parsed(writer, batch) == official(batch)
    named = [record(n, **{f"item.{n}": n}) for n in range(30)]  # a key per span
    assert parsed(writer, named) == official(named)
    assert parsed(writer, named) == official(named)
    kept = writer._attributes._kept  # bounded: 16 keys, 4 values each
    assert len({(field, key) for field, key, _, _ in kept}) <= 16 and len(kept) <= 16 * 4


@pytest.fixture
def exporters() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for exporter in made:
        exporter.shutdown()


def test_only_exporters_that_encode_with_encode_spans_take_encoded_spans(
    exporters: list[Any],
) -> None:
    http = HttpSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    exporters.append(http)
    assert accept_encoded(http) and accept_encoded(http)  # wrapped once
    assert not accept_encoded(ConsoleSpanExporter())
    # The wrapped encoder still encodes the SDK's spans as before.
    module = __import__(type(http).__module__, fromlist=["encode_spans"])
    spans = readable_spans([record(2)], Resource(RESOURCE), InstrumentationScope(*SCOPE))
    assert module.encode_spans(spans) == encode_spans(spans)


@pytest.mark.parametrize("transport", ["http", "http-gzip", "grpc"])
def test_the_official_exporters_send_the_written_request(
    transport: str, exporters: list[Any]
) -> None:
    batch = [record(n) for n in range(10)]
    collector = grpc_collector if transport == "grpc" else http_collector
    with collector() as (endpoint, received):
        if transport != "grpc":
            compression = Compression.Gzip if transport == "http-gzip" else None
            exporter: Any = HttpSpanExporter(
                endpoint=f"{endpoint}/v1/traces", compression=compression
            )
        else:
            exporter = GrpcSpanExporter(endpoint=endpoint, insecure=True)
        exporters.append(exporter)
        assert accept_encoded(exporter)
        written = EncodedSpans(RequestWriter(RESOURCE, SCOPE).encode(batch), len(batch))
        assert exporter.export(written) is SpanExportResult.SUCCESS
    spans = received.spans()
    assert len(spans) == 10
    resource, first = spans[0]
    assert resource == RESOURCE
    assert first.kind == SpanKind.INTERNAL.value + 1  # record(0): kind 0, as OTLP numbers it
    assert attributes(first.attributes)["messaging.message.id"] == "0190-000000"
    assert received.traces == [written.message()]
    if transport != "grpc":  # the written bytes posted as they are (the collector unzips)
        assert received.trace_bodies == [written.written]
