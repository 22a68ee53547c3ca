"""Jobs tallied in plain dicts render on /metrics exactly as the SDK instruments would."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from taskq_core.obs.job_tally import JobTally, JobTallyCollector
from taskq_core.obs.job_tally_export import TallyExporter
from taskq_core.obs.metrics import INSTRUMENTATION, create_instruments, job_attributes
from taskq_core.obs.telemetry import metrics_reader

JOBS = [
    ("echo", "default", "succeeded", "default", 0.003),
    ("echo", "default", "succeeded", "default", 0.2),
    ("echo", "default", "failed", "default", 7.0),
    ("report", "slow", "succeeded", "batch", 4000.0),  # past the last bucket
    ("report", "slow", "succeeded", "batch", 0.005),  # on a bound
]
FAMILIES = ("messaging_client_consumed_messages", "messaging_process_duration_seconds")


def samples(registry: CollectorRegistry) -> dict[str, set[tuple[str, tuple, float]]]:
    text = generate_latest(registry).decode()
    return {
        family.name: {
            (s.name, tuple(sorted(s.labels.items())), round(s.value, 9)) for s in family.samples
        }
        for family in text_string_to_metric_families(text)
        if family.name in FAMILIES
    }


def test_the_tally_renders_what_the_sdk_instruments_render() -> None:
    through_sdk = CollectorRegistry()
    provider = MeterProvider(metric_readers=[metrics_reader(through_sdk)])
    meters = create_instruments(provider.get_meter(INSTRUMENTATION))
    tally = JobTally()
    for actor, queue, outcome, group, seconds in JOBS:
        attributes = job_attributes(actor, queue, outcome, group)
        meters.consumed_messages.add(1, attributes)
        meters.process_duration.record(seconds, attributes)
        tally.record(actor, queue, outcome, group, seconds)
    tallied = CollectorRegistry()
    tallied.register(JobTallyCollector(tally))
    expected = samples(through_sdk)
    assert set(expected) == set(FAMILIES)
    assert samples(tallied) == expected
    provider.shutdown()


def test_an_empty_tally_renders_nothing() -> None:
    registry = CollectorRegistry()
    registry.register(JobTallyCollector(JobTally()))
    assert samples(registry) == {}


# --- the tally in what a metrics exporter sends (obs/job_tally_export.py) -----------------


class Recording(MetricExporter):
    """Keeps what it is asked to export."""

    def __init__(self, temporality: AggregationTemporality) -> None:
        super().__init__(
            preferred_temporality={Counter: temporality, Histogram: temporality},
        )
        self.exported: list[MetricsData] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exported.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def job_points(data: MetricsData) -> dict[str, set[tuple[Any, ...]]]:
    """The two job metrics' points in an export, times left out."""
    found: dict[str, set[tuple[Any, ...]]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == INSTRUMENTATION
            for metric in sm.metrics:
                if metric.name not in ("messaging.client.consumed.messages",
                                       "messaging.process.duration"):  # fmt: skip
                    continue
                points = set()
                for p in metric.data.data_points:
                    labels = tuple(sorted(p.attributes.items()))
                    if isinstance(p, HistogramDataPoint):
                        points.add((labels, p.count, round(p.sum, 9), tuple(p.bucket_counts),
                                    tuple(p.explicit_bounds)))  # fmt: skip
                    else:
                        points.add((labels, p.value))
                found[f"{metric.name} {metric.unit} {metric.data.aggregation_temporality}"] = points
    return found


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE,
                                         AggregationTemporality.DELTA])  # fmt: skip
def test_an_exporter_sends_the_tally_as_the_sdk_instruments_would(
    temporality: AggregationTemporality,
) -> None:
    through_sdk, through_tally = Recording(temporality), Recording(temporality)
    sdk_reader = PeriodicExportingMetricReader(through_sdk, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[sdk_reader])
    meters = create_instruments(provider.get_meter(INSTRUMENTATION))
    tally = JobTally()
    exporter = TallyExporter(through_tally, Resource({}), tally)
    # Two exports: the first three jobs, then the rest (a delta export: only the new ones).
    for jobs in (JOBS[:3], JOBS[3:]):
        for actor, queue, outcome, group, seconds in jobs:
            attributes = job_attributes(actor, queue, outcome, group)
            meters.consumed_messages.add(1, attributes)
            meters.process_duration.record(seconds, attributes)
            tally.record(actor, queue, outcome, group, seconds)
        provider.force_flush()
        exporter.export(MetricsData([]))
    provider.shutdown()  # a last export of its own, left out
    assert len(through_tally.exported) == 2
    for sdk, tallied in zip(through_sdk.exported[:2], through_tally.exported, strict=True):
        expected = job_points(sdk)
        assert len(expected) == 2
        assert job_points(tallied) == expected
