"""OTLP collector stand-ins for the export tests: an HTTP/protobuf receiver and a gRPC one.

Both decode what they receive with ``opentelemetry.proto`` and keep it; ``spans()`` and
``metric_names()`` flatten it with the resource attributes each item was sent with.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def exporting_worker_env(base: dict[str, str], **otel: str) -> dict[str, str]:
    """A `taskq worker --until-idle` environment for the export tests: ``base`` (a test
    schema's) without its OTEL_* variables, quiet and quick to go idle, with ``otel``."""
    env = {k: v for k, v in base.items() if not k.startswith("OTEL_")}
    env.update(
        TASKQ_HEALTH_ENABLED="false",
        TASKQ_LOG_LEVEL="WARNING",
        TASKQ_IDLE_SETTLE_WINDOW="0",
        TASKQ_IDLE_POLL_INTERVAL="0.05",
        **otel,
    )
    return env


def value_of(value: AnyValue) -> Any:
    """The Python value of an OTLP AnyValue."""
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP KeyValue list as a dict."""
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Received:
    """What a collector stand-in was sent (decoded requests, in arrival order)."""

    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    trace_bodies: list[bytes] = field(default_factory=list)  # as posted over HTTP
    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        with self.lock:
            return [
                (attributes(rs.resource.attributes), span)
                for request in self.traces
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]

    def metric_names(self) -> dict[str, dict[str, Any]]:
        """Every metric name received, with the resource attributes it came with."""
        with self.lock:
            return {
                metric.name: attributes(rm.resource.attributes)
                for request in self.metrics
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for metric in sm.metrics
            }


@contextmanager
def http_collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on a free port: yields (endpoint, what it received)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            reply: Any
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with received.lock:
                    received.traces.append(request)
                    received.trace_bodies.append(body)
                reply = trace_service_pb2.ExportTraceServiceResponse()
            elif self.path == "/v1/metrics":
                metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                with received.lock:
                    received.metrics.append(metrics)
                reply = metrics_service_pb2.ExportMetricsServiceResponse()
            else:
                self.send_error(404)
                return
            payload = reply.SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:
        with self.received.lock:
            self.received.traces.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:
        with self.received.lock:
            self.received.metrics.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@contextmanager
def grpc_collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver on a free port: yields (endpoint, what it received)."""
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(received), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(grace=None).wait()
