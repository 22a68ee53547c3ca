"""OpenTelemetry SDK set-up for ``taskq worker`` and ``taskq workgroup``, from the OTEL_* variables.

What gets installed (each only when something will read it, so an unconfigured worker keeps
the API's no-op providers and pays nothing for spans):

- a TracerProvider, with one batch span processor per exporter named in
  OTEL_TRACES_EXPORTER (``otlp``, ``console``);
- a MeterProvider, with one periodic reader per exporter named in OTEL_METRICS_EXPORTER, plus
  a Prometheus reader on a private registry when the worker serves ``/metrics``.

Unset exporter variables mean ``none`` (the specification's default is ``otlp``; a worker
exports nothing unless told to). OTEL_SDK_DISABLED=true or TASKQ_OTEL_ENABLED=false installs
nothing at all. A provider the application installed before (its actors module, or
``opentelemetry-instrument``) is kept as it is. The OTLP exporter classes come from the
``opentelemetry-exporter-otlp`` package (``pip install 'taskq[otlp]'``) and read the rest of
their configuration themselves (OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT, ...).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from taskq_core.errors import ConfigError
from taskq_core.obs.exporters import OTLP_HINT, named_exporter
from taskq_core.obs.logs import get_logger
from taskq_core.settings import TaskqSettings

if TYPE_CHECKING:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from taskq_core.obs.span_shipping import SpanShipper

Role = Literal["worker", "workgroup"]
SERVICE_NAMES: dict[str, str] = {"worker": "taskq-worker", "workgroup": "taskq-workgroup"}
# How long the exit waits, at most, for the last spans and metrics to leave.
SHUTDOWN_TIMEOUT = 5.0

# Exporter names each signal accepts. ``prometheus`` for metrics names the worker's /metrics,
# which is there whether or not it is listed.
_EXPORTERS = {
    "traces": ("otlp", "console", "none"),
    "metrics": ("otlp", "console", "none", "prometheus"),
}

# What /metrics renders: set by setup_telemetry, or by metrics_reader() for an application
# that builds its own MeterProvider.
_endpoint_registry: CollectorRegistry | None = None


@dataclass
class Telemetry:
    """What set-up installed (None: nothing of that kind), to inspect and to shut down."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    registry: CollectorRegistry | None = None  # what /metrics renders
    span_exporters: tuple[str, ...] = ()  # ``otlp (grpc)``, ``console``
    metric_exporters: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # ``traces``/``metrics``: the application's provider was kept
    # A worker's CONSUMER spans, exported from a process of their own (obs.span_shipping).
    span_shipper: SpanShipper | None = None
    # Only /metrics reads the meters: finished jobs are tallied in plain dicts (obs.job_tally).
    jobs_counted_locally: bool = False

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Flush what is buffered and stop the exporters, waiting ``timeout`` seconds at most
        (a collector that does not answer delays the exit by that much, no more: the
        exporters retry on their own threads, which the exit then ends). Never raises."""
        if self.jobs_counted_locally:
            from taskq_core.obs.job_tally import count_jobs_locally

            count_jobs_locally(False)
        if self.tracer_provider is None and self.meter_provider is None:
            return
        flush = threading.Thread(
            target=self._shutdown, args=(timeout,), name="telemetry-shutdown", daemon=True
        )
        flush.start()
        flush.join(timeout)
        if flush.is_alive():
            get_logger("telemetry").warning(
                "telemetry_flush_timed_out",
                timeout=timeout,
                note="spans or metrics still buffered were not exported",
            )

    def _shutdown(self, timeout: float) -> None:
        try:
            if self.span_shipper is not None:
                self.span_shipper.close(timeout)
            if self.tracer_provider is not None:
                self.tracer_provider.force_flush(int(timeout * 1000))
                self.tracer_provider.shutdown()
            if self.meter_provider is not None:
                self.meter_provider.shutdown(timeout_millis=timeout * 1000)
        except Exception as exc:  # an exporter's failure must not change the exit
            get_logger("telemetry").warning(
                "telemetry_shutdown_failed", error=f"{type(exc).__name__}: {exc}"
            )


def exporter_names(signal: str, environ: Mapping[str, str]) -> list[str]:
    """The exporters OTEL_<SIGNAL>_EXPORTER names, ``none`` dropped; unset means none.

    Raises ConfigError for a name TaskQ does not know.
    """
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = [part.strip().lower() for part in environ.get(variable, "").split(",")]
    names = list(dict.fromkeys(name for name in names if name))
    known = _EXPORTERS[signal]
    for name in names:
        if name not in known:
            raise ConfigError(f"{variable}: unknown exporter {name!r} (use {', '.join(known)})")
    return [name for name in names if name not in ("none", "prometheus")]


def metric_export_interval(environ: Mapping[str, str]) -> float:
    """OTEL_METRIC_EXPORT_INTERVAL in milliseconds (default 60000)."""
    raw = environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return 60_000.0
    try:
        millis = float(raw)
    except ValueError:
        millis = 0.0
    if not millis > 0:
        raise ConfigError(
            f"OTEL_METRIC_EXPORT_INTERVAL: expected milliseconds above 0, got {raw!r}"
        )
    return millis


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    """OTEL_SDK_DISABLED=true (case-insensitive), as the specification reads it."""
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def resource(settings: TaskqSettings, role: Role) -> Resource:
    """service.name (OTEL_SERVICE_NAME, else taskq-worker/taskq-workgroup),
    deployment.environment[.name] (TASKQ_ENVIRONMENT), taskq.worker_group
    (TASKQ_WORKER_GROUP), and whatever OTEL_RESOURCE_ATTRIBUTES says, which wins over
    TaskQ's own."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    ours: dict[str, str] = {
        "service.name": SERVICE_NAMES[role],
        "taskq.worker_group": settings.worker_group,
    }
    if settings.environment:
        # Both spellings: the current conventions' (also on TaskQ's spans) and the older
        # one many backends still key on.
        ours["deployment.environment.name"] = settings.environment
        ours["deployment.environment"] = settings.environment
    from_env = OTELResourceDetector().detect().attributes
    if {"deployment.environment", "deployment.environment.name"} & set(from_env):
        # One spelling set there names the environment: TaskQ's would contradict it.
        ours.pop("deployment.environment", None)
        ours.pop("deployment.environment.name", None)
    return Resource.create({**ours, **from_env})


# Its signature is alike worker/batch_hook.py's HookPipe constructor by shape only: typed
# parameters.
def build_telemetry(
    settings: TaskqSettings,
    *,
    role: Role,
    metrics_endpoint: bool,
    traces: bool = True,
    metrics: bool = True,
) -> Telemetry:
    """The providers the OTEL_* variables ask for, not installed anywhere.

    ``metrics_endpoint``: the process serves /metrics (a Prometheus reader is added);
    ``traces``/``metrics`` False: leave that signal alone (the application owns it).
    """
    environ = os.environ
    if not settings.otel_enabled or sdk_disabled(environ):
        return Telemetry()
    span_names = exporter_names("traces", environ) if traces else []
    metric_names = exporter_names("metrics", environ) if metrics else []
    interval = metric_export_interval(environ)
    telemetry = Telemetry()
    described = resource(settings, role)
    missing: list[str] = []  # signals asking for OTLP without the package
    span_exporters = [named_exporter("traces", name, environ, missing) for name in span_names]
    span_pairs = [pair for pair in span_exporters if pair is not None]
    metric_exporters = [named_exporter("metrics", name, environ, missing) for name in metric_names]
    metric_pairs = [pair for pair in metric_exporters if pair is not None]
    if missing:
        get_logger("telemetry").warning(
            "otlp_exporter_missing",
            signals=missing,
            note=f"OTLP export needs the OTLP exporter package: {OTLP_HINT}; "
            f"{' and '.join(missing)} are not exported",
        )
    if span_pairs:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=described, shutdown_on_exit=False)
        for _, exporter in span_pairs:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        telemetry.tracer_provider = provider
        telemetry.span_exporters = tuple(label for label, _ in span_pairs)
        if role == "worker":
            from taskq_core.obs.metrics import INSTRUMENTATION
            from taskq_core.obs.span_shipping import SpanShipper

            shipped = [name for name, pair in zip(span_names, span_exporters, strict=True) if pair]
            # The scope of the tracer spans.tracer() gets: the name, no version.
            telemetry.span_shipper = SpanShipper(
                provider, shipped, described.attributes, (INSTRUMENTATION, None), environ
            )
    readers: list[MetricReader] = []
    # A worker counts its finished jobs in plain dicts (obs.job_tally), which /metrics and
    # its exporters read: two SDK instrument calls per job cost a quarter of a no-op drain.
    telemetry.jobs_counted_locally = (
        metrics and role == "worker" and bool(metric_pairs or metrics_endpoint)
    )
    if metric_pairs:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        exporters = [exporter for _, exporter in metric_pairs]
        if telemetry.jobs_counted_locally:
            from taskq_core.obs.job_tally_export import tallied

            exporters = tallied(exporters, described)
        readers += [
            PeriodicExportingMetricReader(exporter, export_interval_millis=interval)
            for exporter in exporters
        ]
        telemetry.metric_exporters = tuple(label for label, _ in metric_pairs)
    if metrics and metrics_endpoint:
        from prometheus_client import CollectorRegistry

        telemetry.registry = CollectorRegistry(auto_describe=True)
        readers.append(metrics_reader(telemetry.registry))
        if telemetry.jobs_counted_locally:
            from taskq_core.obs.job_tally import JobTallyCollector

            telemetry.registry.register(JobTallyCollector())
    if readers:
        from opentelemetry.sdk.metrics import MeterProvider

        telemetry.meter_provider = MeterProvider(
            metric_readers=readers, resource=described, shutdown_on_exit=False
        )
    return telemetry


def setup_telemetry(settings: TaskqSettings, *, role: Role) -> Telemetry:
    """Build the providers the OTEL_* variables ask for and install them as the global ones.

    Call it once per process, after the application's modules are imported: a tracer or meter
    provider already installed is kept (its signal is left to the application). The worker's
    /metrics then renders the returned ``registry``. Call ``shutdown()`` on the way out.
    """
    global _endpoint_registry
    from opentelemetry import metrics, trace

    log = get_logger("telemetry")
    traces_free = isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    metrics_free = type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    health = role == "worker" and settings.health_enabled
    telemetry = build_telemetry(
        settings, role=role, metrics_endpoint=health, traces=traces_free, metrics=metrics_free
    )
    telemetry.kept = tuple(
        signal for signal, free in (("traces", traces_free), ("metrics", metrics_free)) if not free
    )
    if telemetry.tracer_provider is not None:
        trace.set_tracer_provider(telemetry.tracer_provider)
        from taskq_core.obs.spans import ship_worker_spans

        ship_worker_spans(telemetry.span_shipper)
    if telemetry.meter_provider is not None:
        metrics.set_meter_provider(telemetry.meter_provider)
    if telemetry.registry is not None:
        _endpoint_registry = telemetry.registry
    from taskq_core.obs.job_tally import count_jobs_locally

    count_jobs_locally(telemetry.jobs_counted_locally)
    if telemetry.span_exporters or telemetry.metric_exporters or telemetry.kept:
        log.info(
            "telemetry_configured",
            traces=list(telemetry.span_exporters),
            metrics=list(telemetry.metric_exporters),
            kept_application_providers=list(telemetry.kept),
        )
    return telemetry


def metrics_registry() -> CollectorRegistry | None:
    """The registry /metrics renders, or None when nothing feeds one."""
    return _endpoint_registry


def metrics_reader(registry: CollectorRegistry | None = None) -> PrometheusMetricReader:
    """A Prometheus reader feeding ``registry``, by default the one the worker's /metrics
    renders: for an application that installs its own MeterProvider
    (``MeterProvider(metric_readers=[metrics_reader(), ...])``)."""
    global _endpoint_registry
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    if registry is None:
        if _endpoint_registry is None:
            _endpoint_registry = CollectorRegistry(auto_describe=True)
        registry = _endpoint_registry
    # No otel_scope_* labels on every series: TaskQ's instruments share one scope.
    return PrometheusMetricReader(scope_info_enabled=False, registry=registry)


def render_metrics(registry: CollectorRegistry) -> bytes:
    """Prometheus text exposition of what the registry's readers collect now."""
    from prometheus_client import generate_latest

    return generate_latest(registry)
