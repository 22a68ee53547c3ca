"""The CONSUMER span recorded without the SDK (obs/span_shipping.py) behaves as the SDK's
span does for a body: an exception marks it, values OTLP cannot carry are dropped, and what
it records becomes an exportable SDK span in the exporter process."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    DEFAULT_OFF,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode, TraceFlags

from taskq_core.obs.span_export import CarriedLink, Record, readable_spans
from taskq_core.obs.span_shipping import SpanShipper

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
    links: list[CarriedLink] = [
        (DISPATCH.trace_id, DISPATCH.span_id, DISPATCH.trace_flags, {"taskq.link": "dispatch"})
    ]
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
    name, kind, trace_id, span_id, start, end, shared, attrs, link_values, events, code, text = (
        record
    )
    assert (name, kind, shared) == ("process a", SpanKind.CONSUMER.value, {})
    assert attrs == {"taskq.actor": "a", "app.ok": "yes", "app.list": [1, 2]}
    assert link_values == [(0xABC, 0xDEF, TraceFlags.SAMPLED, {"taskq.link": "dispatch"})]
    assert (code, text) == (StatusCode.ERROR.value, "ValueError: boom")
    assert [event[0] for event in events] == ["exception"]
    assert events[0][2]["exception.type"] == "ValueError"
    assert start <= end and span.get_span_context().span_id == span_id != 0 and trace_id != 0
    # What the exporter process makes of it encodes as OTLP.
    (sdk_span,) = readable_spans(records, Resource({}), InstrumentationScope("taskq"))
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
    name, kind, trace_id, span_id, start, end, shared, attrs, links, events, code, text = record
    assert (name, kind, start, shared, attrs, links) == ("dispatch", SpanKind.INTERNAL.value,
                                                         1_000, {}, {"n": 3}, [])  # fmt: skip
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


@pytest.mark.parametrize(
    "sampler",
    [TraceIdRatioBased(0.3), ParentBasedTraceIdRatio(0.3), ParentBased(TraceIdRatioBased(0.3))],
    ids=["traceidratio", "parentbased_traceidratio", "parentbased(traceidratio)"],
)
def test_a_ratio_sampler_decides_each_trace_as_it_would_itself(sampler: Sampler) -> None:
    shipper = SpanShipper(TracerProvider(sampler=sampler), [], {}, ("taskq", None))
    decided = []
    for _ in range(400):
        with shipper.span("process a", SpanKind.CONSUMER, {}, []) as span:
            context = span.get_span_context()
        # A job's span starts a trace of its own: no parent, whatever is current.
        asked = sampler.should_sample(Context(), context.trace_id, "process a").decision
        assert span.is_recording() is False  # ended
        assert context.trace_flags.sampled == asked.is_sampled()
        decided.append(asked.is_sampled())
    shipper.close(timeout=1.0)
    assert 40 < sum(decided) < 200  # about 120: both decisions are taken


@pytest.mark.parametrize("sampler", [ALWAYS_OFF, DEFAULT_OFF], ids=["always_off", "parentbased"])
def test_a_never_sampler_ships_nothing_of_a_new_trace(
    sampler: Sampler, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipper = SpanShipper(TracerProvider(sampler=sampler), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    for _ in range(20):
        with shipper.span("process a", SpanKind.CONSUMER, {}, []) as span:
            assert span.get_span_context().is_valid
            assert not span.get_span_context().trace_flags.sampled
    shipper.close(timeout=1.0)
    assert records == []


class LinkSeeing(Sampler):
    """An application's sampler that reads the links and adds an attribute."""

    def __init__(self) -> None:
        self.seen: list[Sequence[Link] | None] = []

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Sequence[Link] | None = None,
                      trace_state: Any = None) -> SamplingResult:  # fmt: skip
        self.seen.append(links)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, {"app.sampled_by": "me"})

    def get_description(self) -> str:
        return "LinkSeeing"


def test_a_sampler_of_the_application_sees_the_links_as_the_api_draws_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampler = LinkSeeing()
    shipper = SpanShipper(TracerProvider(sampler=sampler), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    carried: list[CarriedLink] = [(0xABC, 0xDEF, 1, {"taskq.link": "dispatch"})]
    with shipper.span("process a", SpanKind.CONSUMER, {"taskq.actor": "a"}, carried):
        pass
    shipper.close(timeout=1.0)
    [[link]] = sampler.seen
    assert (link.context.trace_id, link.context.span_id, link.context.is_remote) == (
        0xABC, 0xDEF, True)  # fmt: skip
    assert link.context.trace_flags.sampled and link.attributes == {"taskq.link": "dispatch"}
    [record] = records
    assert record[7] == {"taskq.actor": "a", "app.sampled_by": "me"}


def test_a_sampler_of_the_application_sees_the_shared_attributes_and_overrides_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Overriding(LinkSeeing):
        def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
            self.shown = dict(args[4] if len(args) > 4 else kwargs["attributes"])
            return SamplingResult(Decision.RECORD_AND_SAMPLE, {"taskq.actor": "renamed"})

    sampler = Overriding()
    shipper = SpanShipper(TracerProvider(sampler=sampler), [], {}, ("taskq", None))
    records: list[Record] = []
    monkeypatch.setattr(shipper, "ship", records.append)
    shared = {"taskq.actor": "a", "messaging.system": "taskq"}
    with shipper.span("process a", SpanKind.CONSUMER, {"taskq.attempt": 1}, [], shared):
        pass
    shipper.close(timeout=1.0)
    assert sampler.shown == {"taskq.actor": "a", "messaging.system": "taskq", "taskq.attempt": 1}
    [record] = records
    assert shared == {"taskq.actor": "a", "messaging.system": "taskq"}  # left as it was
    assert {**record[6], **record[7]} == {
        "taskq.actor": "renamed", "messaging.system": "taskq", "taskq.attempt": 1}  # fmt: skip
    assert not record[6].keys() & record[7].keys()  # written once each


def test_setting_a_shared_attribute_changes_this_span_only(
    shipped: tuple[SpanShipper, list[Record]],
) -> None:
    shipper, records = shipped
    shared = {"taskq.actor": "a", "messaging.system": "taskq"}
    with shipper.span("process a", SpanKind.CONSUMER, {"taskq.attempt": 1}, [], shared) as span:
        span.set_attribute("app.note", "kept")
    with shipper.span("process a", SpanKind.CONSUMER, {"taskq.attempt": 2}, [], shared) as span:
        span.set_attribute("taskq.actor", "b")
    with shipper.span("process a", SpanKind.CONSUMER, {"taskq.attempt": 3}, [], shared) as span:
        span.set_attributes({"messaging.system": "other", "app.n": 3})
    first, second, third = records
    assert first[6] is shared and first[7] == {"taskq.attempt": 1, "app.note": "kept"}
    assert second[6] == {} and second[7] == {
        "taskq.actor": "b", "messaging.system": "taskq", "taskq.attempt": 2}  # fmt: skip
    assert third[6] == {}
    assert third[7] == {"taskq.actor": "a", "messaging.system": "other", "taskq.attempt": 3,
                        "app.n": 3}  # fmt: skip
    assert shared == {"taskq.actor": "a", "messaging.system": "taskq"}
    (sdk_span, *_) = readable_spans(records, Resource({}), InstrumentationScope("taskq"))
    assert dict(sdk_span.attributes or {}) == {"taskq.actor": "a", "messaging.system": "taskq",
                                                "taskq.attempt": 1, "app.note": "kept"}  # fmt: skip


def test_the_jobs_of_an_actor_and_queue_share_one_mapping_of_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taskq_core.obs import spans

    labels = spans.SpanLabels("media", "staging")
    name, shared = labels.processing("resize", "images")
    assert name == "process resize" and labels.processing("resize", "images")[1] is shared
    assert shared == {
        "messaging.system": "taskq", "messaging.consumer.group.name": "media",
        "deployment.environment.name": "staging", "messaging.destination.name": "images",
        "messaging.operation.type": "process", "taskq.actor": "resize",
    }  # fmt: skip
    assert labels.processing("resize", "thumbs")[1]["messaging.destination.name"] == "thumbs"
    monkeypatch.setattr(spans, "_PROCESSING_KEPT", 3)  # past the bound: made, not kept
    made = [labels.processing(f"actor_{n}", "q") for n in range(5)]
    assert [m[0] for m in made] == [f"process actor_{n}" for n in range(5)]
    assert len(labels._processing) == 3
