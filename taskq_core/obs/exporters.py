"""The exporters the OTEL_* variables name: the SDK's console ones and the official OTLP ones
(``opentelemetry-exporter-otlp``, ``pip install 'taskq[otlp]'``), which read the rest of
their configuration themselves (OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT, ...). Used by
``telemetry`` and by the span exporter process (``span_shipping``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskq_core.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_PROTOCOL = "http/protobuf"  # the specification's default
OTLP_HINT = "pip install 'taskq[otlp]'"

# The OTLP exporter classes: (signal, protocol) -> (module, class).
_OTLP_CLASSES: dict[tuple[str, str], tuple[str, str]] = {
    ("traces", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("traces", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("metrics", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "OTLPMetricExporter",
    ),
    ("metrics", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
        "OTLPMetricExporter",
    ),
}
# The SDK's console exporter classes: signal -> (module, class).
_CONSOLE_CLASSES: dict[str, tuple[str, str]] = {
    "traces": ("opentelemetry.sdk.trace.export", "ConsoleSpanExporter"),
    "metrics": ("opentelemetry.sdk.metrics.export", "ConsoleMetricExporter"),
}


def otlp_protocol(signal: str, environ: Mapping[str, str]) -> str:
    """OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else the default."""
    for variable in (
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        value = environ.get(variable, "").strip().lower()
        if value:
            if value not in PROTOCOLS:
                raise ConfigError(
                    f"{variable}: unsupported protocol {value!r} (use grpc or http/protobuf)"
                )
            return value
    return DEFAULT_PROTOCOL


def span_exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    """The span exporter ``name`` (``otlp``, ``console``) as ``build_telemetry`` makes it: for
    the span exporter process (``span_shipping``), which reads the same variables."""
    made = named_exporter("traces", name, environ, [])
    if made is None:
        raise ConfigError(f"no {name} span exporter: {OTLP_HINT}")
    span: SpanExporter = made[1]
    return span


def named_exporter(
    signal: str, name: str, environ: Mapping[str, str], missing: list[str]
) -> tuple[str, Any] | None:
    """(label, exporter) for ``name`` of ``signal``: the SDK's console one, else OTLP (see
    ``_otlp``); None when the OTLP package is missing (``signal`` added to ``missing``)."""
    if name == "console":
        module_name, class_name = _CONSOLE_CLASSES[signal]
        return "console", getattr(importlib.import_module(module_name), class_name)()
    return _otlp(signal, environ, missing)


def _otlp(signal: str, environ: Mapping[str, str], missing: list[str]) -> tuple[str, Any] | None:
    """The official OTLP exporter for ``signal``, or None (the signal added to ``missing``)
    when the package is not installed."""
    protocol = otlp_protocol(signal, environ)
    module_name, class_name = _OTLP_CLASSES[(signal, protocol)]
    try:
        exporter_class = getattr(importlib.import_module(module_name), class_name)
    except ImportError:
        missing.append(signal)
        return None
    return f"otlp ({protocol})", exporter_class()
