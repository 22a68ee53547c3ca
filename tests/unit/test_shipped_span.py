"""The CONSUMER span recorded without the SDK (obs/span_shipping.py) behaves as the SDK's
span does for a body: an exception marks it, values OTLP cannot carry are dropped, and what
it records becomes an exportable SDK span in the exporter process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode, TraceFlags

from taskq_core.obs.span_shipping import Record, SpanShipper, _readable_spans

DISPATCH = SpanContext(0xABC, 0xDEF, False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


@pytest.fixture
def shipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SpanShipper, list[Record]]]:
    """A shipper whose records stay here (no exporter process)."""
    shipper = SpanShipper(TracerProvider(), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    yield shipper, records
    shipper.close(timeout=1.0)


def test_a_failing_body_marks_its_span_and_odd_values_are_dropped(
    shipped: tuple[SpanShipper, list[Record]],
) -> None:
    shipper, records = shipped
    links = [Link(DISPATCH, {"taskq.link": "dispatch"})]
    with (
        pytest.raises(ValueError),
        shipper.span("process a", SpanKind.CONSUMER, {"taskq.actor": "a"}, links) as span,
    ):
        span.set_attribute("app.ok", "yes")
        span.set_attribute("app.odd", {"not": "carried"})  # type: ignore[arg-type]
        span.set_attributes({"app.list": [1, 2], "app.mixed": [1, object()]})  # type: ignore[list-item]
        raise ValueError("boom")
    assert not span.is_recording()
    (record,) = records
    name, kind, trace_id, span_id, start, end, attrs, link_values, events, code, text = record
    assert (name, kind) == ("process a", SpanKind.CONSUMER.value)
    assert attrs == {"taskq.actor": "a", "app.ok": "yes", "app.list": [1, 2]}
    assert link_values == [(0xABC, 0xDEF, TraceFlags.SAMPLED, {"taskq.link": "dispatch"})]
    assert (code, text) == (StatusCode.ERROR.value, "ValueError: boom")
    assert [event[0] for event in events] == ["exception"]
    assert events[0][2]["exception.type"] == "ValueError"
    assert start <= end and span.get_span_context().span_id == span_id != 0 and trace_id != 0
    # What the exporter process makes of it encodes as OTLP.
    (sdk_span,) = _readable_spans(records, Resource({}), InstrumentationScope("taskq"))
    assert sdk_span.status.status_code is StatusCode.ERROR
    assert encode_spans([sdk_span]).resource_spans[0].scope_spans[0].spans[0].name == "process a"


def test_an_unsampled_span_records_nothing_and_is_not_shipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipper = SpanShipper(TracerProvider(sampler=ALWAYS_OFF), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    with shipper.span("process a", SpanKind.CONSUMER, {}, []) as span:
        assert not span.is_recording() and span.get_span_context().is_valid
    shipper.close(timeout=1.0)
    assert records == []


def test_a_dispatch_span_is_shipped_ended_and_marked_by_its_error(
    shipped: tuple[SpanShipper, list[Record]],
) -> None:
    shipper, records = shipped
    context = shipper.ended("dispatch", SpanKind.INTERNAL, {"n": 3}, 1_000, ConnectionError("x"))
    (record,) = records
    name, kind, trace_id, span_id, start, end, attrs, links, events, code, text = record
    assert (name, kind, start, attrs, links) == ("dispatch", SpanKind.INTERNAL.value, 1_000,
                                                 {"n": 3}, [])  # fmt: skip
    assert (trace_id, span_id) == (context.trace_id, context.span_id) and end > start
    assert (code, text) == (StatusCode.ERROR.value, "ConnectionError")
    assert [event[0] for event in events] == ["exception"]


def test_an_unsampled_dispatch_span_still_has_a_context_to_link_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipper = SpanShipper(TracerProvider(sampler=ALWAYS_OFF), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    context = shipper.ended("dispatch", SpanKind.INTERNAL, {}, 1_000)
    shipper.close(timeout=1.0)
    assert context.is_valid and not context.trace_flags.sampled and records == []
