"""Finished jobs counted and timed in plain dicts, for a worker whose meters only /metrics reads.

An OpenTelemetry SDK counter ``add`` or histogram ``record`` costs several microseconds, tens
on a busy host: two of them per job took a quarter of a no-op drain's rate. When nothing
exports the meters (no OTEL_METRICS_EXPORTER, no application provider), a job's count and
duration go here instead (well under a microsecond), and ``JobTallyCollector`` renders them
at a scrape under the names and labels the OpenTelemetry Prometheus exporter gives
``messaging.client.consumed.messages`` and ``messaging.process.duration``, so /metrics reads
the same either way. An OTLP or console metrics exporter that ``taskq worker`` set up reads
them too (``job_tally_export``). Only when the application installed its own meter provider
are jobs recorded on the SDK instruments (``obs.metrics.record_job``) and this stays empty.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from taskq_core.obs import metrics
from taskq_core.obs.metrics import JOB_BUCKETS, SPECS, job_attributes

TallyKey = tuple[str, str, str, str]  # actor, queue, outcome, consumer group


class JobTally:
    """Per (actor, queue, outcome, group): the count per duration bucket, then the sum, the
    least and the most seconds (``entry[:len(buckets) + 1]``, ``entry[sum_at]``, ``entry[min_at]``,
    ``entry[max_at]``).

    Written on the event loop's thread; read by a scrape (the health server, same thread) or
    an exporter's thread, which copies the dict first (a C-level copy under the GIL).
    """

    def __init__(self, buckets: tuple[float, ...] = JOB_BUCKETS) -> None:
        self.buckets = buckets
        self.sum_at = len(buckets) + 1
        self.min_at = self.sum_at + 1
        self.max_at = self.sum_at + 2
        self._entries: dict[TallyKey, list[float]] = {}

    def record(self, actor: str, queue: str, outcome: str, group: str, seconds: float) -> None:
        """One finished job."""
        key = (actor, queue, outcome, group)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = [0.0] * self.min_at + [seconds, seconds]
        entry[bisect_left(self.buckets, seconds)] += 1
        entry[self.sum_at] += seconds
        if seconds < entry[self.min_at]:
            entry[self.min_at] = seconds
        elif seconds > entry[self.max_at]:
            entry[self.max_at] = seconds

    def counts(self, entry: list[float]) -> list[float]:
        """An entry's count per bucket (the last past the last bound)."""
        return entry[: self.sum_at]

    def snapshot(self) -> list[tuple[TallyKey, list[float]]]:
        """Every key with a copy of its entry."""
        return [(key, list(entry)) for key, entry in list(self._entries.items())]


JOB_TALLY = JobTally()


def count_jobs_locally(enabled: bool = True) -> None:
    """Record finished jobs in ``JOB_TALLY`` (True) or on the SDK instruments (False)."""
    metrics.set_job_sink(JOB_TALLY.record if enabled else None)


class JobTallyCollector(Collector):
    """Renders a ``JobTally`` as the Prometheus exporter renders the two SDK instruments."""

    def __init__(self, tally: JobTally = JOB_TALLY) -> None:
        self.tally = tally

    def collect(self) -> Iterator[Metric]:
        entries = self.tally.snapshot()
        if not entries:
            return
        counted, timed = SPECS["consumed_messages"], SPECS["process_duration"]
        labels = [_prometheus(name) for name in job_attributes("", "", "", "")]
        count = CounterMetricFamily(_prometheus(counted.name), counted.description, labels=labels)
        duration = HistogramMetricFamily(
            _prometheus(timed.name) + "_seconds", timed.description, labels=labels
        )
        for (actor, queue, outcome, group), entry in entries:
            values = [str(v) for v in job_attributes(actor, queue, outcome, group).values()]
            counts = self.tally.counts(entry)
            count.add_metric(values, sum(counts))
            cumulative, running = [], 0.0
            for bound, n in zip((*self.tally.buckets, float("inf")), counts, strict=True):
                running += n
                cumulative.append((_bound(bound), running))
            duration.add_metric(values, cumulative, sum_value=entry[self.tally.sum_at])
        yield count
        yield duration


def _prometheus(name: str) -> str:
    """An OpenTelemetry name as the Prometheus exporter writes it (``a.b`` -> ``a_b``)."""
    return name.replace(".", "_")


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
