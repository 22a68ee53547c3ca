"""OpenTelemetry set-up from the OTEL_* variables: what gets installed, and a real worker
process exporting its CONSUMER span and metrics to OTLP collector stand-ins (HTTP and gRPC)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2
from structlog.testing import capture_logs

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.errors import ConfigError
from taskq_core.obs.telemetry import Telemetry, build_telemetry, resource
from taskq_core.settings import TaskqSettings
from tests.conftest import TASKQ_BIN, PgTarget
from tests.obs.collector import (
    Received,
    attributes,
    exporting_worker_env,
    grpc_collector,
    http_collector,
)

ROOT = Path(__file__).resolve().parents[2]
OTLP_HTTP_TRACES = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
OTLP_HTTP_METRICS = "opentelemetry.exporter.otlp.proto.http.metric_exporter"


@pytest.fixture(autouse=True)
def clean_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


@pytest.fixture
def built() -> Iterator[list[Telemetry]]:
    """Telemetry a test built, shut down afterwards (their exporters run threads)."""
    made: list[Telemetry] = []
    yield made
    for telemetry in made:
        telemetry.shutdown(timeout=1.0)


def build(made: list[Telemetry], *, endpoint: bool = True, **settings: object) -> Telemetry:
    telemetry = build_telemetry(
        TaskqSettings.load(**settings), role="worker", metrics_endpoint=endpoint
    )
    made.append(telemetry)
    return telemetry


def test_unset_exporters_install_no_tracer_and_no_exporting_reader(
    built: list[Telemetry], monkeypatch: pytest.MonkeyPatch
) -> None:
    for value in (None, "none"):
        if value is not None:
            monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
            monkeypatch.setenv("OTEL_METRICS_EXPORTER", value)
        served = build(built)
        assert served.tracer_provider is None and served.span_exporters == ()
        assert served.metric_exporters == ()
        # Only /metrics reads the meters.
        assert served.meter_provider is not None and served.registry is not None
        assert build(built, endpoint=False) == Telemetry()


@pytest.mark.parametrize(
    "switch",
    [{"OTEL_SDK_DISABLED": "TRUE"}, {"TASKQ_OTEL_ENABLED": "false"}],
    ids=["OTEL_SDK_DISABLED", "TASKQ_OTEL_ENABLED"],
)
def test_the_off_switches_install_nothing_even_with_exporters_named(
    built: list[Telemetry], monkeypatch: pytest.MonkeyPatch, switch: dict[str, str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    for key, value in switch.items():
        monkeypatch.setenv(key, value)
    assert build(built) == Telemetry()


def test_each_signal_gets_the_exporters_and_protocol_it_names(
    built: list[Telemetry], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp, console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp,prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    with http_collector() as (endpoint, _):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        telemetry = build(built)
        assert telemetry.span_exporters == ("otlp (http/protobuf)", "console")
        assert telemetry.metric_exporters == ("otlp (grpc)",)
        assert telemetry.tracer_provider is not None and telemetry.meter_provider is not None
        telemetry.shutdown(timeout=1.0)
        built.remove(telemetry)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER: unknown exporter 'zipkin'"),
        ("OTEL_METRICS_EXPORTER", "otlp,jaeger", "OTEL_METRICS_EXPORTER: unknown exporter"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "unsupported protocol 'http/json'"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "soon", "OTEL_METRIC_EXPORT_INTERVAL: expected"),
    ],
)
def test_bad_values_are_one_line_naming_the_variable(
    built: list[Telemetry], monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=says) as caught:
        build(built)
    assert "\n" not in str(caught.value)


def test_otlp_without_the_exporter_package_warns_once_and_exports_nothing(
    built: list[Telemetry], monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (OTLP_HTTP_TRACES, OTLP_HTTP_METRICS):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if absent
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp,console")
    with capture_logs() as logs:
        telemetry = build(built, endpoint=False)
    assert telemetry.tracer_provider is None
    assert telemetry.metric_exporters == ("console",)  # the rest still works
    [warning] = [entry for entry in logs if entry["event"] == "otlp_exporter_missing"]
    assert warning["log_level"] == "warning"
    assert warning["signals"] == ["traces", "metrics"]
    assert "pip install 'taskq[otlp]'" in warning["note"]


def test_resource_names_the_service_environment_and_worker_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = TaskqSettings.load(environment="staging", worker_group="media")
    attributes = resource(settings, "worker").attributes
    assert attributes["service.name"] == "taskq-worker"
    assert attributes["deployment.environment"] == "staging"
    assert attributes["deployment.environment.name"] == "staging"
    assert attributes["taskq.worker_group"] == "media"
    assert resource(TaskqSettings.load(), "workgroup").attributes["service.name"] == (
        "taskq-workgroup"
    )
    assert "deployment.environment" not in resource(TaskqSettings.load(), "worker").attributes
    # The OTEL_* variables win over TaskQ's own labels.
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,team=pay")
    attributes = resource(settings, "worker").attributes
    assert attributes["service.name"] == "billing"
    assert attributes["deployment.environment"] == "prod"
    assert "deployment.environment.name" not in attributes  # not TaskQ's contradicting one
    assert attributes["team"] == "pay"


def test_a_provider_the_application_installed_is_kept() -> None:
    # The global providers can be set once per process: a fresh interpreter.
    code = (
        "from opentelemetry import trace;"
        "from opentelemetry.sdk.trace import TracerProvider;"
        "mine = TracerProvider(); trace.set_tracer_provider(mine);"
        "from taskq_core.obs.logs import configure_logging; configure_logging(level='WARNING');"
        "from taskq_core.settings import TaskqSettings;"
        "from taskq_core.obs.telemetry import setup_telemetry;"
        "t = setup_telemetry(TaskqSettings.load(), role='worker');"
        "print(t.kept, t.tracer_provider is None, trace.get_tracer_provider() is mine,"
        " t.registry is not None); t.shutdown()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TASKQ_"))}
    env.update(OTEL_TRACES_EXPORTER="console")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('traces',) True True True"


# --- a real worker process against collector stand-ins ------------------------------------


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


async def run_exporting_worker(pg: PgTarget, **otel: str) -> str:
    """`taskq worker --until-idle` with the given OTEL_* variables; returns its stderr."""
    env = exporting_worker_env(
        pg.env(),
        TASKQ_ENVIRONMENT="staging",
        TASKQ_WORKER_GROUP="media",
        OTEL_METRIC_EXPORT_INTERVAL="600000",  # the exit's flush is what the test reads
        **otel,
    )
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry", "--until-idle",
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return err.decode()


def consumer_span(received: Received, job_id: str) -> tuple[dict[str, Any], Any]:
    """(resource attributes, span) of the one span received for this job."""
    matching = [
        (res, span)
        for res, span in received.spans()
        if attributes(span.attributes).get("messaging.message.id") == job_id
    ]
    assert len(matching) == 1, [span.name for _, span in received.spans()]
    return matching[0]


async def export_one_job(
    pg: PgTarget, backend: PostgresBackend, received: Received, service: str, **otel: str
) -> None:
    """One job through a real worker: its CONSUMER span and the metrics reach the collector."""
    job = await backend.enqueue(EnqueueArgs("echo", {"n": 1}))
    await run_exporting_worker(pg, **otel)
    labels, span = consumer_span(received, str(job.id))
    assert span.name == "process echo"
    assert span.kind == trace_pb2.Span.SPAN_KIND_CONSUMER
    attrs = attributes(span.attributes)
    assert attrs["taskq.actor"] == "echo"
    assert attrs["messaging.destination.name"] == "default"
    assert attrs["taskq.outcome"] == "succeeded"
    # Linked to the DISPATCH span that claimed it, exported alongside.
    dispatches = {span.span_id for _, span in received.spans() if span.name == "dispatch"}
    assert {link.span_id for link in span.links} & dispatches
    assert labels["service.name"] == service
    assert labels["deployment.environment"] == "staging"
    assert labels["taskq.worker_group"] == "media"
    metrics = received.metric_names()
    assert "messaging.client.consumed.messages" in metrics
    assert metrics["messaging.client.consumed.messages"]["service.name"] == service
    # The job counted (from the worker's tally) once, under its actor and outcome.
    counted = job_points(received, "messaging.client.consumed.messages", "sum")
    assert [(p.as_int, attributes(p.attributes)["taskq.outcome"]) for p in counted] == [
        (1, "succeeded")
    ]
    (timed,) = job_points(received, "messaging.process.duration", "histogram")
    assert timed.count == 1 and timed.sum >= 0


def job_points(received: Received, name: str, kind: str) -> list[Any]:
    """The data points of metric ``name`` (a ``sum`` or a ``histogram``) in the last export."""
    *_, last = received.metrics
    return [
        point
        for rm in last.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in getattr(metric, kind).data_points
    ]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.postgres
async def test_a_worker_exports_the_consumer_span_and_metrics_over_otlp_http(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    with http_collector() as (endpoint, received):
        await export_one_job(
            pg,
            backend,
            received,
            "taskq-worker",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        )


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.postgres
async def test_a_worker_exports_over_otlp_grpc_under_its_service_name(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    with grpc_collector() as (endpoint, received):
        await export_one_job(
            pg,
            backend,
            received,
            "billing",
            OTEL_SERVICE_NAME="billing",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        )


def test_a_collector_that_hangs_costs_the_exit_only_the_flush_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as hanging:  # accepts connections (the backlog), never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen()
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{hanging.getsockname()[1]}"
        )
        settings = TaskqSettings.load()
        telemetry = build_telemetry(settings, role="worker", metrics_endpoint=False)
        assert telemetry.tracer_provider is not None and telemetry.meter_provider is not None
        with telemetry.tracer_provider.get_tracer("test").start_as_current_span("lost"):
            pass
        telemetry.meter_provider.get_meter("test").create_counter("lost").add(1)
        with capture_logs() as logs:
            telemetry.shutdown(timeout=0.2)  # returns, and raises nothing
    assert "telemetry_flush_timed_out" in [entry["event"] for entry in logs]
