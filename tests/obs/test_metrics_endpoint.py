"""/metrics is the OpenTelemetry meters in Prometheus text: parsed with prometheus_client's
parser and compared with what an in-memory reader on the same provider holds, and with the
jobs a real worker ran."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.obs import telemetry
from taskq_core.obs.telemetry import metrics_reader
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.health import HealthServer, probe
from taskq_core.worker.runtime import Worker
from tests.conftest import TASKQ_BIN, PgTarget

ROOT = Path(__file__).resolve().parents[2]


def make_deps() -> WorkerDeps:
    """A real WorkerDeps, built the way the worker builds its own."""
    backend = InMemoryBackend()
    settings = TaskqSettings.load(health_enabled=True)
    return Worker(settings, {}, backend=backend, install_signal_handlers=False)._build_deps(backend)


def families(text: str) -> dict[str, Metric]:
    """The exposition parsed by prometheus_client, by family name."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(family: Metric, suffix: str = "", **labels: str) -> float:
    """The one sample of ``family`` named name+suffix whose labels include ``labels``."""
    [value] = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and labels.items() <= s.labels.items()
    ]
    return float(value)


def held(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """What the in-memory reader holds now: data points by OpenTelemetry name."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


async def scrape(server: HealthServer) -> str:
    status, content_type, body = await server.route("GET", "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


async def test_metrics_render_what_the_meters_hold_under_prometheus_names() -> None:
    registry = CollectorRegistry()
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[metrics_reader(registry), memory])
    meter = provider.get_meter("taskq")
    consumed = meter.create_counter("messaging.client.consumed.messages", unit="{message}")
    duration = meter.create_histogram("taskq.dispatch.duration", unit="s")
    depth = {"default": 3, "media": 0}

    def observe(_: CallbackOptions) -> list[Observation]:
        return [Observation(n, {"messaging.destination.name": q}) for q, n in depth.items()]

    meter.create_observable_gauge("taskq.queue.depth", [observe], unit="{job}")
    for outcome, times in (("succeeded", 4), ("failed", 1)):
        for _ in range(times):
            consumed.add(1, {"taskq.actor": "resize", "taskq.outcome": outcome})
    for seconds in (0.002, 0.004, 0.030):
        duration.record(seconds)
    server = HealthServer(make_deps(), make_deps().liveness, registry=registry)
    try:
        text = await scrape(server)
        points = held(memory)
        parsed = families(text)

        counter = parsed["messaging_client_consumed_messages"]
        assert counter.type == "counter"
        for point in points["messaging.client.consumed.messages"]:
            labels = {k.replace(".", "_"): str(v) for k, v in point.attributes.items()}
            assert sample(counter, "_total", **labels) == point.value
        assert sample(counter, "_total", taskq_outcome="succeeded") == 4

        histogram = parsed["taskq_dispatch_duration_seconds"]
        assert histogram.type == "histogram"
        [point] = points["taskq.dispatch.duration"]
        assert sample(histogram, "_count") == point.count == 3
        assert sample(histogram, "_sum") == pytest.approx(point.sum)

        gauge = parsed["taskq_queue_depth"]
        assert gauge.type == "gauge"
        assert sample(gauge, messaging_destination_name="default") == 3
        depth["default"] = 7  # gauges are read at scrape time
        assert sample(families(await scrape(server))["taskq_queue_depth"],
                      messaging_destination_name="default") == 7  # fmt: skip
    finally:
        provider.shutdown()


async def test_without_meters_metrics_says_why_in_a_comment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry, "_endpoint_registry", None)  # nothing set up here
    deps = make_deps()
    server = HealthServer(deps, deps.liveness)
    text = await scrape(server)
    assert text.startswith("# ") and "TASKQ_OTEL_ENABLED=false" in text
    assert families(text) == {}


# --- a real worker ------------------------------------------------------------------------


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A directory short enough for a Unix socket path."""
    path = Path(tempfile.mkdtemp(prefix="tq-", dir="/tmp"))
    yield path
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


def worker_env(pg: PgTarget, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in pg.env().items() if not k.startswith("OTEL_")}
    env.update(TASKQ_LOG_LEVEL="WARNING", TASKQ_HEARTBEAT_INTERVAL="0.5", **extra)
    return env


async def scrape_until(path: str, done: Any, timeout: float = 30) -> dict[str, Metric]:
    """Scrape the worker's socket until ``done(families)`` (or fail after ``timeout``)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                status, body = await probe(path, "/metrics")
            except OSError:
                status, body = 0, ""  # not bound yet
            if status == 200:
                parsed = families(body)
                if done(parsed):
                    return parsed
            await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.postgres
async def test_a_worker_counts_the_jobs_it_ran_on_its_metrics_endpoint(
    pg: PgTarget, backend: PostgresBackend, socket_dir: Path
) -> None:
    jobs = 5
    await backend.enqueue_batch([EnqueueArgs("echo", {"n": n}) for n in range(jobs)])
    path = str(socket_dir / "w.sock")
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry",
        cwd=ROOT, env=worker_env(pg, TASKQ_HEALTH_SOCKET_PATH=path),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def succeeded(parsed: dict[str, Metric]) -> float:
            family = parsed.get("messaging_client_consumed_messages")
            if family is None:
                return 0
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total")
                and s.labels.get("taskq_actor") == "echo"
                and s.labels.get("taskq_outcome") == "succeeded"
            )

        def leading(parsed: dict[str, Metric]) -> bool:
            family = parsed.get("taskq_maintenance_leader_is_leader")
            return family is not None and sample(family) == 1

        # The only worker becomes the leader soon after its start: wait for that too.
        parsed = await scrape_until(path, lambda p: succeeded(p) >= jobs and leading(p))
        assert succeeded(parsed) == jobs
        durations = parsed["messaging_process_duration_seconds"]
        assert sum(
            s.value for s in durations.samples
            if s.name.endswith("_count") and s.labels.get("taskq_actor") == "echo"
        ) == jobs  # fmt: skip
        # The worker-state gauges, read at the scrape.
        assert sample(parsed["taskq_database_available"]) == 1
        assert sample(parsed["taskq_shutdown_phase"]) == 0
        assert "taskq_active_jobs" in parsed
        [info] = parsed["target_info"].samples
        assert info.labels["service_name"] == "taskq-worker"
        assert info.labels["taskq_worker_group"] == "default"

        cli = await asyncio.create_subprocess_exec(
            TASKQ_BIN, "health", "metrics", "--socket", path,
            env=worker_env(pg), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await cli.communicate()
        assert cli.returncode == 0, err.decode()
        assert succeeded(families(out.decode())) == jobs
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
