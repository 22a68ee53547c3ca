"""Fleet metrics: jobs, workers and queues in known states, and what a scrape of them says.

Each scrape goes through ``FleetMetrics.exposition`` (what an HTTP server serves) and is read
back with prometheus_client's text parser, as Prometheus would read it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from prometheus_client.parser import text_string_to_metric_families

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import (
    Backend,
    EnqueueArgs,
    ErrorInfo,
    FleetStats,
    ReadStaleness,
    Start,
    WorkerInfo,
    WorkerRow,
)
from taskq_core.clock import FakeClock
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.obs.fleet import FleetMetrics, FleetSettings
from taskq_core.obs.fleet_server import FleetServer
from tests.backend_pair import KINDS, open_backend
from tests.conftest import PgTarget
from tests.tui.proxy import PostgresProxy

WINDOW = timedelta(minutes=5)
LEASE = timedelta(minutes=10)
BOOM = ErrorInfo("ValueError", "boom", "Traceback: boom")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(metrics: FleetMetrics, accept: str | None = None) -> Samples:
    """One scrape, parsed: (sample name, sorted labels) -> value."""
    content_type, body = await metrics.exposition(accept)
    assert content_type.startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[f"taskq_fleet_{name}", tuple(sorted(labels.items()))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


async def run_to(backend: Backend, queue: str, actor: str, outcome: str) -> None:
    """Enqueue a job in ``queue`` and take it to ``outcome`` as a worker would."""
    job = await backend.enqueue(EnqueueArgs(actor=actor, queue=queue, priority=1000))
    worker = uuid4()
    (claimed,) = await backend.dispatch_batch(worker, [queue], 1, LEASE)
    assert claimed.id == job.id
    if outcome == "claimed":
        return
    assert await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
    if outcome == "succeeded":
        assert await backend.mark_succeeded(claimed.lease(), None)
    elif outcome == "failed":
        assert await backend.mark_failed_or_retry(claimed.lease(), BOOM, None) is not None
    else:
        assert outcome == "running"


async def register(backend: Backend, queues: list[str]) -> UUID:
    worker = uuid4()
    await backend.register_worker(WorkerInfo(worker, "box", 1, queues, ["resize"], 4))
    return worker


async def seed(backend: Backend) -> None:
    """media: resize 2 pending + 1 scheduled + 1 running + 1 claimed, 3 succeeded and 1
    failed; thumb 1 succeeded. mail: paused, 1 pending. Three workers: two live (one the
    leader), one stopped."""
    for outcome in ("succeeded", "succeeded", "failed", "running", "claimed", "succeeded"):
        await run_to(backend, "media", "resize", outcome)
    await run_to(backend, "media", "thumb", "succeeded")
    await backend.enqueue_batch([EnqueueArgs(actor="resize", queue="media") for _ in range(2)])
    await backend.enqueue(EnqueueArgs(actor="resize", queue="media", delay=timedelta(hours=1)))
    await backend.enqueue(EnqueueArgs(actor="send", queue="mail"))
    await backend.update_queue("mail", paused=True)
    leader = await register(backend, ["media", "mail"])
    assert await backend.try_acquire_leadership(leader)
    await register(backend, ["media", "reports"])
    await backend.mark_worker_stopped(await register(backend, ["mail"]))


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, pg_server_dsn: str) -> AsyncIterator[Backend]:
    async with open_backend(request.param, pg_server_dsn) as opened:
        yield opened


async def test_a_scrape_reports_the_queues_actors_and_workers(backend: Backend) -> None:
    await seed(backend)
    samples = await scrape(FleetMetrics(backend, FleetSettings(window=WINDOW)))

    assert value(samples, "up") == 1
    assert value(samples, "window_seconds") == 300
    assert value(samples, "jobs", queue="media", status="pending") == 2
    assert value(samples, "jobs", queue="media", status="scheduled") == 1
    assert value(samples, "jobs", queue="media", status="running") == 2  # started + claimed
    assert value(samples, "claimed_jobs", queue="media") == 1
    assert value(samples, "jobs", queue="mail", status="pending") == 1
    assert value(samples, "queue_paused", queue="mail") == 1
    assert value(samples, "queue_paused", queue="media") == 0

    finished = {
        status: value(samples, "finished_jobs", queue="media", status=status)
        for status in ("succeeded", "failed", "cancelled", "crashed", "abandoned")
    }
    assert finished == {"succeeded": 4, "failed": 1, "cancelled": 0, "crashed": 0, "abandoned": 0}
    assert value(samples, "throughput_jobs_per_second", queue="media") == pytest.approx(5 / 300)
    assert value(samples, "failure_ratio", queue="media") == pytest.approx(1 / 5)
    assert ("taskq_fleet_failure_ratio", (("queue", "mail"),)) not in samples  # none ended
    assert value(samples, "started_jobs", queue="media") == 6  # 5 ended + 1 running
    assert 0 <= value(samples, "start_latency_seconds", queue="media", quantile="0.95") < 60

    assert value(samples, "actor_jobs", queue="media", actor="resize", status="pending") == 2
    assert value(samples, "actor_jobs", queue="media", actor="resize", status="running") == 2
    resize_done = value(
        samples, "actor_finished_jobs", queue="media", actor="resize", status="succeeded"
    )
    thumb_done = value(
        samples, "actor_finished_jobs", queue="media", actor="thumb", status="succeeded"
    )
    assert (resize_done, thumb_done) == (3, 1)
    assert value(samples, "actor_jobs", queue="mail", actor="send", status="pending") == 1

    assert value(samples, "workers") == 2
    assert value(samples, "leader") == 1
    assert value(samples, "queue_workers", queue="media") == 2
    assert value(samples, "queue_workers", queue="mail") == 1  # the other one stopped
    assert value(samples, "queue_workers", queue="reports") == 1  # consumed, no jobs yet


async def test_ages_and_latencies_are_read_on_the_backend_clock() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
    clock.advance(40)
    await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
    clock.advance(10)
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, ["q"], 2, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt) for job in claimed])
    await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
    clock.advance(7)

    samples = await scrape(FleetMetrics(backend, FleetSettings(window=WINDOW), clock))
    assert value(samples, "oldest_pending_age_seconds", queue="q") == 7
    # Waits of 50 and 10 seconds: percentile_cont between them, 1 is the longest.
    latency = {
        q: value(samples, "start_latency_seconds", queue="q", quantile=q)
        for q in ("0.5", "0.95", "0.99", "1")
    }
    assert latency == pytest.approx({"0.5": 30, "0.95": 48, "0.99": 49.6, "1": 50})
    assert value(samples, "start_latency_mean_seconds", queue="q") == 30
    assert value(samples, "actor_start_latency_seconds", queue="q", actor="a", quantile="1") == 50


class CountingSource:
    """A backend's fleet reads, counted, that wait at ``gate`` while it is closed."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.reads = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.failing = False

    async def get_fleet_stats(self, window: timedelta) -> FleetStats:
        self.reads += 1
        self.entered.set()
        await self.gate.wait()
        if self.failing:
            raise DatabaseUnavailableError("connection refused")
        return await self.backend.get_fleet_stats(window)

    async def list_workers(self) -> list[WorkerRow]:
        return await self.backend.list_workers()

    async def get_read_staleness(self) -> ReadStaleness | None:
        return await self.backend.get_read_staleness()


async def test_scrapes_within_the_interval_share_one_read() -> None:
    clock = FakeClock()
    source = CountingSource(InMemoryBackend(clock=clock))
    metrics = FleetMetrics(source, FleetSettings(min_interval=5), clock)
    await scrape(metrics)
    clock.advance(4.9)
    await scrape(metrics)
    assert source.reads == 1
    clock.advance(0.2)
    await scrape(metrics)
    assert source.reads == 2

    # Concurrent scrapes while a read is under way wait for that read.
    clock.advance(10)
    source.gate.clear()
    source.entered.clear()
    waiting = [asyncio.create_task(scrape(metrics)) for _ in range(5)]
    await source.entered.wait()
    waiting[0].cancel()  # a scraper that hangs up does not cancel the read for the others
    source.gate.set()
    results = await asyncio.gather(*waiting[1:])
    assert source.reads == 3
    assert all(value(r, "up") == 1 for r in results)


async def test_a_failed_read_is_up_0_and_the_next_read_comes_back() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
    source = CountingSource(backend)
    metrics = FleetMetrics(source, FleetSettings(min_interval=5), clock)
    source.failing = True
    down = await scrape(metrics)
    assert value(down, "up") == 0
    assert names(down) == {
        "taskq_fleet_up",
        "taskq_fleet_read_duration_seconds",
        "taskq_fleet_snapshot_age_seconds",
    }  # no numbers rather than stale ones
    source.failing = False
    assert value(await scrape(metrics), "up") == 0  # the failure is served for the interval
    assert source.reads == 1
    clock.advance(5)
    back = await scrape(metrics)
    assert value(back, "up") == 1
    assert value(back, "jobs", queue="q", status="pending") == 1


async def test_a_read_past_the_timeout_is_up_0() -> None:
    source = CountingSource(InMemoryBackend())
    source.gate.clear()  # the database never answers
    metrics = FleetMetrics(source, FleetSettings(read_timeout=0.05))
    assert value(await scrape(metrics), "up") == 0
    assert metrics.reader.latest is not None
    assert metrics.reader.latest.error == "no answer within 0.05s"


async def test_openmetrics_is_served_when_asked_for() -> None:
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    backend = InMemoryBackend()
    await seed(backend)
    metrics = FleetMetrics(backend, FleetSettings())
    content_type, body = await metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = {family.name: family for family in openmetrics_families(body.decode())}
    assert families["taskq_fleet_start_latency_seconds"].unit == "seconds"
    assert "taskq_fleet_jobs" in families


@pytest.mark.postgres
async def test_a_database_outage_is_survived_and_ends_by_itself(pg: PgTarget) -> None:
    clock = FakeClock()  # paces the reads only; the rows are on the database's clock
    async with PostgresProxy(pg.dsn) as proxy:
        backend = await PostgresBackend.connect(proxy.dsn, pg.schema, max_size=2)
        try:
            await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
            metrics = FleetMetrics(backend, FleetSettings(min_interval=5, read_timeout=5), clock)
            assert value(await scrape(metrics), "up") == 1
            await proxy.stop()  # the database host goes away
            clock.advance(5)
            down = await scrape(metrics)
            assert value(down, "up") == 0
            assert "taskq_fleet_jobs" not in names(down)
            await proxy.start()  # ... and comes back
            clock.advance(5)
            back = await scrape(metrics)
            assert value(back, "up") == 1
            assert value(back, "jobs", queue="q", status="pending") == 1
        finally:
            await backend.close()


async def _http(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_the_server_answers_get_and_head_on_metrics_only() -> None:
    backend = InMemoryBackend()
    await backend.enqueue(EnqueueArgs(actor="a", queue="q"))
    server = FleetServer(FleetMetrics(backend, FleetSettings()), "127.0.0.1", 0)
    await server.start()
    try:
        status, body = await _http(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and b'taskq_fleet_jobs{queue="q",status="pending"} 1.0' in body
        assert await _http(server.port, b"HEAD /metrics HTTP/1.1\r\n\r\n") == (200, b"")
        assert (await _http(server.port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await _http(server.port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
    finally:
        await server.stop()
