"""The catalogue itself: every instrument created as declared, and documented in
docs/metrics.md under its OpenTelemetry name and the name the Prometheus exporter gives it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from taskq_core.obs.gauges import CALLBACKS
from taskq_core.obs.metrics import CATALOGUE, Instruments, Spec, create_instruments

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| (\w+) \| `([^`]+)` \| (.*?) \| (.+) \|$")


def documented() -> dict[str, tuple[str, str, str, str]]:
    """The catalogue tables of docs/metrics.md: OTel name -> (Prometheus name, kind, unit,
    attributes)."""
    text = DOC.read_text()
    tables = text[text.index("## The catalogue") : text.index("## Attributes")]
    rows: dict[str, tuple[str, str, str, str]] = {}
    for line in tables.splitlines():
        found = ROW.match(line)
        if found:
            name, prometheus, kind, unit, attributes, _ = found.groups()
            assert name not in rows, f"{name} is documented twice"
            rows[name] = (prometheus, kind, unit, attributes)
    return rows


def rendered(spec: Spec) -> tuple[str, str]:
    """(the name a scrape shows, the family type) for one instrument, through the
    Prometheus exporter the worker's /metrics uses."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("taskq")
    try:
        if spec.kind == "counter":
            meter.create_counter(spec.name, unit=spec.unit).add(1)
        elif spec.kind == "histogram":
            meter.create_histogram(spec.name, unit=spec.unit).record(1.0)
        else:

            def one(_: CallbackOptions) -> list[Observation]:
                return [Observation(1)]

            meter.create_observable_gauge(spec.name, [one], unit=spec.unit)
        text = generate_latest(registry).decode()
        [family] = [f for f in text_string_to_metric_families(text) if f.name != "target_info"]
    finally:
        provider.shutdown()
    sample = family.name + "_total" if family.type == "counter" else family.name
    return sample, family.type


def test_every_instrument_is_documented_under_its_otel_and_prometheus_names() -> None:
    rows = documented()
    assert sorted(rows) == sorted(spec.name for spec in CATALOGUE)
    for spec in CATALOGUE:
        prometheus, kind, unit, attributes = rows[spec.name]
        assert (prometheus, kind) == rendered(spec), spec.name
        assert unit == spec.unit, spec.name
        listed = re.findall(r"`([^`]+)`", attributes)
        assert listed == list(spec.attributes), spec.name


def test_the_catalogue_is_what_gets_created() -> None:
    names = [spec.name for spec in CATALOGUE]
    assert len(names) == len(set(names)) >= 25
    fields = {field.name for field in dataclasses.fields(Instruments)}
    recorded = {spec.key for spec in CATALOGUE if spec.kind != "gauge"}
    assert fields == recorded
    assert set(CALLBACKS) == {spec.key for spec in CATALOGUE if spec.kind == "gauge"}
    provider = MeterProvider()
    made = create_instruments(provider.get_meter("taskq"))
    for spec in CATALOGUE:
        if spec.kind != "gauge":
            instrument = getattr(made, spec.key)
            assert (instrument.name, instrument.unit) == (spec.name, spec.unit)
    provider.shutdown()
