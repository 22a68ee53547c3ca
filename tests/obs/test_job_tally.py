"""Jobs tallied in plain dicts render on /metrics exactly as the SDK instruments would."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from taskq_core.obs.job_tally import JobTally, JobTallyCollector
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
