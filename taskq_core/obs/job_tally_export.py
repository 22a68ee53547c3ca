"""The job tally in what a metrics exporter sends: a worker counts its finished jobs in plain
dicts (``job_tally``) even when OTEL_METRICS_EXPORTER is set.

Two SDK instrument calls per job (the count and the duration) took a quarter of the event
loop's samples of a worker exporting metrics over OTLP, more than its spans. ``TallyExporter``
wraps each metrics exporter ``taskq worker`` sets up: at every export it adds
``messaging.client.consumed.messages`` and ``messaging.process.duration`` from the tally to
what the SDK collected, as the SDK's own instruments would have reported them (same names,
units, attributes, buckets and scope; cumulative or delta, as the exporter prefers).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics import Counter, Histogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.export import Sum as SumData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from taskq_core.obs.job_tally import JOB_TALLY, JobTally, TallyKey
from taskq_core.obs.metrics import INSTRUMENTATION, SPECS, job_attributes


class TallyExporter(MetricExporter):
    """A metrics exporter that sends the job tally along with what it is given."""

    def __init__(
        self, inner: MetricExporter, resource: Resource, tally: JobTally = JOB_TALLY
    ) -> None:
        preferred = getattr(inner, "_preferred_temporality", None) or {}
        super().__init__(
            preferred_temporality=preferred,
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self.resource = resource  # the provider's: for an export that carries nothing else
        self.tally = tally
        self.counter_delta = preferred.get(Counter) is AggregationTemporality.DELTA
        self.histogram_delta = preferred.get(Histogram) is AggregationTemporality.DELTA
        self._started = time.time_ns()
        self._last_export = self._started
        self._last: dict[TallyKey, list[float]] = {}  # what the last export counted, per key

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        return self.inner.export(self._with_tally(metrics_data), timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis, **kwargs)

    def _with_tally(self, data: MetricsData) -> MetricsData:
        """``data`` with the tally's two metrics in the worker's scope (its first resource)."""
        now = time.time_ns()
        added = self._tally_metrics(now)
        self._last_export = now
        if not added:
            return data
        if not data.resource_metrics:
            scope = ScopeMetrics(InstrumentationScope(INSTRUMENTATION), added, "")
            return MetricsData([ResourceMetrics(self.resource, [scope], "")])
        first, *rest = data.resource_metrics
        scopes = list(first.scope_metrics)
        for index, scope in enumerate(scopes):
            if scope.scope.name == INSTRUMENTATION:
                metrics = [*scope.metrics, *added]
                scopes[index] = ScopeMetrics(scope.scope, metrics, scope.schema_url)
                break
        else:
            scopes.append(ScopeMetrics(InstrumentationScope(INSTRUMENTATION), added, ""))
        return MetricsData([ResourceMetrics(first.resource, scopes, first.schema_url), *rest])

    def _tally_metrics(self, now: int) -> list[Metric]:
        tally, counter_delta, histogram_delta = self.tally, self.counter_delta, self.histogram_delta
        counted: list[NumberDataPoint] = []
        timed: list[HistogramDataPoint] = []
        for key, entry in tally.snapshot():
            before = self._last.get(key)
            self._last[key] = entry
            counts = tally.counts(entry)
            new = counts
            if before is not None:
                new = [n - b for n, b in zip(counts, tally.counts(before), strict=True)]
                if (counter_delta or histogram_delta) and not any(new):
                    continue  # nothing new: a delta exporter sends no point for it
            attributes = job_attributes(*key)
            counted.append(
                NumberDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=self._last_export if counter_delta else self._started,
                    time_unix_nano=now,
                    value=int(sum(new if counter_delta else counts)),
                )
            )
            used = new if histogram_delta else counts
            seconds = entry[tally.sum_at] - (
                before[tally.sum_at] if histogram_delta and before is not None else 0.0
            )
            timed.append(
                HistogramDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=self._last_export if histogram_delta else self._started,
                    time_unix_nano=now,
                    count=int(sum(used)),
                    sum=seconds,
                    bucket_counts=[int(n) for n in used],
                    explicit_bounds=list(tally.buckets),
                    # Over the whole run: the tally keeps no per-interval extremes.
                    min=entry[tally.min_at],
                    max=entry[tally.max_at],
                )
            )
        if not counted:
            return []
        return [
            _metric("consumed_messages", SumData(counted, _temporality(counter_delta), True)),
            _metric("process_duration", HistogramData(timed, _temporality(histogram_delta))),
        ]


def _temporality(delta: bool) -> AggregationTemporality:
    return AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE


def _metric(key: str, data: SumData | HistogramData) -> Metric:
    spec = SPECS[key]
    return Metric(name=spec.name, description=spec.description, unit=spec.unit, data=data)


def tallied(exporters: Sequence[MetricExporter], resource: Resource) -> list[MetricExporter]:
    """Each exporter wrapped to send the job tally too."""
    return [TallyExporter(exporter, resource) for exporter in exporters]
