"""Telemetry: a worker's drain with no OpenTelemetry SDK, with the meters /metrics reads, and
exporting traces and metrics over OTLP/HTTP, side by side.

Variants of one `taskq worker --until-idle` (concurrency 16) over the same backlog. Each
round drains once per variant, back to back, the order rotated every round; a share of one
variant against another is the median of the rounds' own shares (``paired``):

- ``no SDK``: TASKQ_OTEL_ENABLED=false; no provider is installed, no instrument records.
- ``/metrics meters``: the default worker: its health server's Prometheus reader on an SDK
  MeterProvider, no exporter; every job's counter and histogram record for real.
- ``OTLP export``: the same, plus OTEL_TRACES_EXPORTER=otlp and OTEL_METRICS_EXPORTER=otlp
  over HTTP to a local receiver that reads each request and throws it away.
- ``OTLP export, 10% sampled``: the same with OTEL_TRACES_SAMPLER=traceidratio at 0.1 (each
  CONSUMER span starts its own trace, so the ratio applies per job).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks.paired import median_seconds, median_share, rotated, shares
from benchmarks.worker_cpu import CpuUse, Part, cpu_use, median_part
from benchmarks.worker_sections import Drained, worker_process
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs

CONCURRENCY = 16
VARIANTS = ("no SDK", "/metrics meters", "OTLP export", "OTLP export, 10% sampled")

FreshBackend = Callable[[], AbstractAsyncContextManager[PostgresBackend]]
Settle = Callable[[PostgresBackend], Awaitable[None]]


@dataclass
class TelemetryFigures:
    """Each round's drain seconds per variant, what the receiver got, and the load around
    the run."""

    jobs: int
    rounds: list[dict[str, float]] = field(default_factory=list)
    exit_codes: set[int] = field(default_factory=set)
    requests: int = 0  # OTLP requests the receiver accepted
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # Each round's worker CPU a job per variant (``worker_cpu``), over the timed drain.
    cpu: list[dict[str, CpuUse | None]] = field(default_factory=list)

    def cpu_part(self, variant: str, part: Part) -> float | None:
        """The median microseconds a job of ``part`` of the worker in ``variant``."""
        return median_part((round_cpu[variant] for round_cpu in self.cpu), part)

    def seconds(self, variant: str) -> float:
        """The variant's median drain seconds."""
        return median_seconds(self.rounds, variant)

    def rate(self, variant: str) -> float:
        """The variant's median drain rate."""
        return self.jobs / self.seconds(variant)

    def share(self, variant: str, base: str) -> float:
        """``variant``'s rate as a fraction of ``base``'s: the median of the rounds' own."""
        return median_share(self.rounds, variant, base)

    def round_shares(self, variant: str, base: str) -> list[float]:
        """``variant``'s rate as a fraction of ``base``'s, round by round."""
        return shares(self.rounds, variant, base)


@contextmanager
def discarding_receiver() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint that accepts every request and keeps only a count."""
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector serves the exporter

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            count[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-discard", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", count
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def variant_env(variant: str, endpoint: str) -> dict[str, str]:
    if variant == "no SDK":
        return {"TASKQ_OTEL_ENABLED": "false"}
    env = {"TASKQ_HEALTH_ENABLED": "true"}  # the benchmark's default worker has it off
    if variant.startswith("OTLP export"):
        env.update(
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_METRIC_EXPORT_INTERVAL="1000",
        )
    if variant.endswith("sampled"):
        env.update(OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.1")
    return env


async def _drain(
    fresh: FreshBackend, settle: Settle, dsn: str, env: dict[str, str], jobs: int
) -> Drained:
    """Seconds for one worker process to leave no active job of ``jobs`` no-ops, its exit
    code and its CPU over those seconds.

    Timed from the resume of the paused queue once the worker has registered, to the last
    job written: its start-up (the exporter's imports) and its exit (the last export) are
    not counted, they are no part of a drain rate.
    """
    async with fresh() as backend:
        await backend.update_queue("default", paused=True)
        await backend.enqueue_batch_fast([EnqueueArgs("noop", {"n": n}) for n in range(jobs)])
        await settle(backend)
        async with worker_process(
            dsn, backend.schema, "--concurrency", str(CONCURRENCY), "--until-idle", extra_env=env
        ) as proc:
            while not await backend.list_workers():
                await asyncio.sleep(0.02)
            before = cpu_use(proc.pid)
            started = time.perf_counter()
            await backend.update_queue("default", paused=False)  # wakes the worker
            while await backend.has_active_jobs(["default"]):
                await asyncio.sleep(0.02)
            seconds = time.perf_counter() - started
            after = cpu_use(proc.pid)
            spent = None if before is None or after is None else after.since(before)
            return Drained(seconds, await proc.wait(), spent)


async def measure(
    fresh: FreshBackend, settle: Settle, dsn: str, jobs: int, rounds: int
) -> TelemetryFigures:
    """``rounds`` rounds of one drain per variant, the order rotated every round."""
    figures = TelemetryFigures(jobs)
    clean = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    for key in clean:  # the variants say what is exported, not the caller's shell
        os.environ.pop(key)
    try:
        with discarding_receiver() as (endpoint, count):
            for number in range(rounds):
                drains: dict[str, float] = {}
                spent: dict[str, CpuUse | None] = {}
                for variant in rotated(VARIANTS, number):
                    env = variant_env(variant, endpoint)
                    drained = await _drain(fresh, settle, dsn, env, jobs)
                    drains[variant] = drained.seconds
                    spent[variant] = None if drained.cpu is None else drained.cpu.per_job(jobs)
                    figures.exit_codes.add(drained.exit_code)
                figures.rounds.append(drains)
                figures.cpu.append(spent)
            figures.requests = count[0]
    finally:
        os.environ.update(clean)
    figures.load = os.getloadavg()
    return figures
