"""Fleet metrics: the queue-level picture for Prometheus, read from the database once for the
whole fleet (not per worker), whoever serves it (``taskq metrics serve``, the web UI).

``FleetReader`` reads a snapshot (``get_fleet_stats`` and the workers) at most once per
``min_interval`` however often it is asked: concurrent scrapes share one read in flight, and a
failed read (the database away, a read past ``read_timeout``) is a snapshot too, whose only
sample is ``taskq_fleet_up 0``; the next read after the interval tries again, so the metrics
come back by themselves. ``FleetCollector`` is a prometheus_client Collector over the latest
snapshot (it never reads the database itself); ``FleetMetrics.exposition`` refreshes the
snapshot and renders it, which is all an HTTP handler needs. Names and meanings are in
docs/fleet-metrics.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from taskq_core.backend.protocol import ReadStaleness, WorkerRow
from taskq_core.backend.protocol.fleet import LATENCY_PERCENTILES, FleetStats, StartLatency
from taskq_core.clock import Clock, SystemClock
from taskq_core.liveness import DEFAULT_STALE_AFTER, worker_is_alive
from taskq_core.obs.logs import get_logger
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus

PREFIX = "taskq_fleet_"
# Outcomes that count as failures in the failure ratio: the job's work did not get done and
# no operator asked for it (cancelled and abandoned jobs were asked to stop).
FAILURE_STATUSES = (JobStatus.FAILED, JobStatus.CRASHED)
# Job statuses reported as current counts (the terminal ones are counted over the window).
WAITING_OR_RUNNING = (JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RUNNING)
_TERMINAL = tuple(s for s in JobStatus if s in TERMINAL_STATUSES)


class FleetSource(Protocol):
    """What the fleet metrics read: a Backend has both."""

    async def get_fleet_stats(self, window: timedelta) -> FleetStats: ...

    async def list_workers(self) -> list[WorkerRow]: ...

    async def get_read_staleness(self) -> ReadStaleness | None: ...


@dataclass(frozen=True)
class FleetSettings:
    """How the fleet metrics read the database.

    ``window``: the span the finished counts, throughput, failure ratio and start latency
    cover (the read's cost grows with the jobs finished within it). ``min_interval``: seconds
    a snapshot is served before the next scrape reads again. ``read_timeout``: seconds one
    read may take before the snapshot says the database is away. ``stale_after``: how long a
    worker may go unheard and still count as live (liveness.py).
    """

    window: timedelta = timedelta(minutes=5)
    min_interval: float = 5.0
    read_timeout: float = 10.0
    stale_after: timedelta = DEFAULT_STALE_AFTER

    def __post_init__(self) -> None:
        if self.window <= timedelta(0):
            raise ValueError(f"window must be positive, got {self.window}")
        if self.min_interval < 0:
            raise ValueError(f"min_interval must not be negative, got {self.min_interval}")
        if self.read_timeout <= 0:
            raise ValueError(f"read_timeout must be positive, got {self.read_timeout}")


@dataclass(frozen=True)
class FleetSnapshot:
    """One read: ``stats`` and ``workers``, or ``error`` when the read failed (``stats``
    None). ``taken_at`` is the monotonic time the read ended, ``read_seconds`` its length;
    ``staleness``: how far behind its primary the replica read was (None: a primary)."""

    stats: FleetStats | None
    workers: Sequence[WorkerRow] = ()
    taken_at: float = 0.0
    read_seconds: float = 0.0
    error: str | None = None
    staleness: ReadStaleness | None = None

    @property
    def up(self) -> bool:
        """Whether the read reached the database."""
        return self.stats is not None


class FleetReader:
    """The cached read: at most one database read per ``min_interval``, shared by every
    caller that asks meanwhile. ``reads`` counts the reads started."""

    def __init__(
        self, source: FleetSource, settings: FleetSettings, clock: Clock | None = None
    ) -> None:
        self.source = source
        self.settings = settings
        self.clock = clock or SystemClock()
        self.reads = 0
        self.latest: FleetSnapshot | None = None
        self._inflight: asyncio.Future[FleetSnapshot] | None = None
        self._log = get_logger("fleet_metrics")

    async def snapshot(self) -> FleetSnapshot:
        """The latest snapshot when younger than ``min_interval``, else a fresh one (the
        read already under way, if any). Never raises for a database failure."""
        latest = self.latest
        if latest is not None and self.age(latest) < self.settings.min_interval:
            return latest
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._read())
        # Shielded: a scrape that hangs up does not cancel the read the others wait on.
        return await asyncio.shield(self._inflight)

    def age(self, snapshot: FleetSnapshot) -> float:
        """Seconds since ``snapshot`` was read."""
        return max(self.clock.monotonic() - snapshot.taken_at, 0.0)

    async def _read(self) -> FleetSnapshot:
        self.reads += 1
        started = self.clock.monotonic()
        try:
            async with asyncio.timeout(self.settings.read_timeout):
                stats = await self.source.get_fleet_stats(self.settings.window)
                workers = await self.source.list_workers()
                staleness = await self._staleness()
        except Exception as exc:
            error = (
                f"no answer within {self.settings.read_timeout:g}s"
                if isinstance(exc, TimeoutError)
                else (str(exc) or type(exc).__name__)
            )
            ended = self.clock.monotonic()
            snapshot = FleetSnapshot(None, (), ended, ended - started, error)
        else:
            ended = self.clock.monotonic()
            snapshot = FleetSnapshot(stats, workers, ended, ended - started, None, staleness)
        finally:
            self._inflight = None
        self._report(snapshot)
        self.latest = snapshot
        return snapshot

    async def _staleness(self) -> ReadStaleness | None:
        """The replica's staleness; None when it does not say (its gauges are then left out
        of the scrape rather than the fleet's numbers)."""
        try:
            return await self.source.get_read_staleness()
        except Exception:
            return None

    def _report(self, snapshot: FleetSnapshot) -> None:
        """Log when the database goes away and when it is back, not at every read."""
        was_up = self.latest is None or self.latest.up
        if was_up and not snapshot.up:
            self._log.warning("fleet_read_failed", error=snapshot.error)
        elif not was_up and snapshot.up:
            self._log.warning("fleet_read_recovered")


def _gauge(
    name: str, documentation: str, labels: Sequence[str] = (), unit: str = ""
) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=labels, unit=unit)


@dataclass
class _Families:
    """The metric families of one collection, filled queue by queue."""

    window: str
    jobs: GaugeMetricFamily = field(init=False)
    claimed: GaugeMetricFamily = field(init=False)
    oldest: GaugeMetricFamily = field(init=False)
    paused: GaugeMetricFamily = field(init=False)
    finished: GaugeMetricFamily = field(init=False)
    throughput: GaugeMetricFamily = field(init=False)
    failure: GaugeMetricFamily = field(init=False)
    started: GaugeMetricFamily = field(init=False)
    latency: GaugeMetricFamily = field(init=False)
    latency_mean: GaugeMetricFamily = field(init=False)
    queue_workers: GaugeMetricFamily = field(init=False)
    actor_jobs: GaugeMetricFamily = field(init=False)
    actor_finished: GaugeMetricFamily = field(init=False)
    actor_latency: GaugeMetricFamily = field(init=False)

    def __post_init__(self) -> None:
        w = self.window
        self.jobs = _gauge(
            "jobs",
            "Jobs waiting or running now, by queue and status (pending: due, scheduled: "
            "waiting for a time, running: claimed or started).",
            ["queue", "status"],
        )
        self.claimed = _gauge(
            "claimed_jobs",
            "Running jobs a worker claimed whose body has not started yet, by queue.",
            ["queue"],
        )
        self.oldest = _gauge(
            "oldest_pending_age",
            "Seconds the longest-waiting pending job of the queue has been due (0: none).",
            ["queue"],
            "seconds",
        )
        self.paused = _gauge("queue_paused", "1 while the queue is paused, else 0.", ["queue"])
        self.finished = _gauge(
            "finished_jobs",
            f"Jobs that ended within the last {w}, by queue and terminal status.",
            ["queue", "status"],
        )
        self.throughput = _gauge(
            "throughput",
            f"Jobs ended per second over the last {w} (any terminal status), by queue.",
            ["queue"],
            "jobs_per_second",
        )
        self.failure = _gauge(
            "failure_ratio",
            f"Failed and crashed jobs over all jobs ended within the last {w}, by queue "
            "(absent when none ended).",
            ["queue"],
        )
        self.started = _gauge(
            "started_jobs",
            f"Jobs started within the last {w} (what the start latency is measured over).",
            ["queue"],
        )
        self.latency = _gauge(
            "start_latency",
            f"Seconds the jobs started within the last {w} waited from due to start, at "
            "these quantiles (1: the longest), by queue.",
            ["queue", "quantile"],
            "seconds",
        )
        self.latency_mean = _gauge(
            "start_latency_mean",
            f"Mean seconds the jobs started within the last {w} waited from due to start.",
            ["queue"],
            "seconds",
        )
        self.queue_workers = _gauge(
            "queue_workers", "Live workers that consume the queue.", ["queue"]
        )
        self.actor_jobs = _gauge(
            "actor_jobs",
            "Jobs waiting or running now, by queue, actor and status (pending, running).",
            ["queue", "actor", "status"],
        )
        self.actor_finished = _gauge(
            "actor_finished_jobs",
            f"Jobs that ended within the last {w}, by queue, actor and terminal status.",
            ["queue", "actor", "status"],
        )
        self.actor_latency = _gauge(
            "actor_start_latency",
            f"Seconds the jobs started within the last {w} waited from due to start, at "
            "these quantiles (1: the longest), by queue and actor.",
            ["queue", "actor", "quantile"],
            "seconds",
        )

    def all(self) -> list[Metric]:
        """Every family, in the order a reader meets them."""
        return [
            self.jobs,
            self.claimed,
            self.oldest,
            self.paused,
            self.queue_workers,
            self.finished,
            self.throughput,
            self.failure,
            self.started,
            self.latency,
            self.latency_mean,
            self.actor_jobs,
            self.actor_finished,
            self.actor_latency,
        ]


def _quantiles(latency: StartLatency) -> list[tuple[str, float]]:
    """(quantile label, seconds) pairs: the percentiles, then 1 for the longest wait."""
    pairs = [(f"{p:g}", latency.percentiles[p]) for p in LATENCY_PERCENTILES]
    return [*pairs, ("1", latency.longest)]


def _window_text(window: timedelta) -> str:
    seconds = window.total_seconds()
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


class FleetCollector(Collector):
    """Renders the reader's latest snapshot; reads nothing itself (prometheus_client calls
    ``collect`` synchronously, so the caller refreshes the snapshot first)."""

    def __init__(self, reader: FleetReader) -> None:
        self.reader = reader

    def describe(self) -> list[Metric]:
        """Nothing to declare up front: the families depend on the snapshot."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The fleet's metric families from the latest snapshot."""
        snapshot = self.reader.latest
        up = _gauge("up", "1 when the last read of the database succeeded, 0 when it failed.")
        up.add_metric([], 1.0 if snapshot is not None and snapshot.up else 0.0)
        yield up
        if snapshot is None:
            return
        read = _gauge(
            "read_duration", "Seconds the last read of the database took.", unit="seconds"
        )
        read.add_metric([], snapshot.read_seconds)
        yield read
        age = _gauge(
            "snapshot_age",
            "Seconds since the snapshot these metrics describe was read (reads are shared "
            "by the scrapes within the minimum interval).",
            unit="seconds",
        )
        age.add_metric([], self.reader.age(snapshot))
        yield age
        if snapshot.stats is None:
            return  # the database is away: no numbers rather than stale ones
        if snapshot.staleness is not None:
            yield from _replica(snapshot.staleness)
        yield from self._fleet(snapshot.stats, snapshot.workers)

    def _fleet(self, stats: FleetStats, workers: Sequence[WorkerRow]) -> Iterator[Metric]:
        window_seconds = stats.window.total_seconds()
        window = _gauge(
            "window",
            "Seconds the windowed metrics (finished, throughput, failure ratio, start "
            "latency) cover.",
            unit="seconds",
        )
        window.add_metric([], window_seconds)
        yield window

        live = [
            w for w in workers if worker_is_alive(w, stats.now, self.reader.settings.stale_after)
        ]
        live_gauge = _gauge("workers", "Live workers (heard from recently, not stopped).")
        live_gauge.add_metric([], float(len(live)))
        yield live_gauge
        leader = _gauge("leader", "1 when a live worker holds the maintenance leader role.")
        leader.add_metric([], 1.0 if any(w.is_leader for w in live) else 0.0)
        yield leader

        families = _Families(_window_text(stats.window))
        consumers: dict[str, int] = {}
        for worker in live:
            for consumed in set(worker.queues):
                consumers[consumed] = consumers.get(consumed, 0) + 1
        for queue in stats.queues:
            name = queue.name
            counts = {
                JobStatus.PENDING: queue.pending,
                JobStatus.SCHEDULED: queue.scheduled,
                JobStatus.RUNNING: queue.running + queue.claimed,
            }
            for status in WAITING_OR_RUNNING:
                families.jobs.add_metric([name, status.value], float(counts[status]))
            families.claimed.add_metric([name], float(queue.claimed))
            oldest = queue.oldest_pending_at
            age = 0.0 if oldest is None else max((stats.now - oldest).total_seconds(), 0.0)
            families.oldest.add_metric([name], age)
            families.paused.add_metric([name], 1.0 if queue.paused else 0.0)
            families.queue_workers.add_metric([name], float(consumers.pop(name, 0)))
            ended = sum(queue.finished.values())
            for status in _TERMINAL:
                families.finished.add_metric(
                    [name, status.value], float(queue.finished.get(status, 0))
                )
            families.throughput.add_metric([name], ended / window_seconds)
            if ended:
                failed = sum(queue.finished.get(status, 0) for status in FAILURE_STATUSES)
                families.failure.add_metric([name], failed / ended)
            latency = queue.latency
            families.started.add_metric([name], float(0 if latency is None else latency.started))
            if latency is not None:
                for quantile, seconds in _quantiles(latency):
                    families.latency.add_metric([name, quantile], seconds)
                families.latency_mean.add_metric([name], latency.mean)
            for actor in queue.actors:
                labels = [name, actor.actor]
                families.actor_jobs.add_metric([*labels, "pending"], float(actor.pending))
                families.actor_jobs.add_metric(
                    [*labels, "running"], float(actor.running + actor.claimed)
                )
                for status in _TERMINAL:
                    families.actor_finished.add_metric(
                        [*labels, status.value], float(actor.finished.get(status, 0))
                    )
                if actor.latency is not None:
                    for quantile, seconds in _quantiles(actor.latency):
                        families.actor_latency.add_metric([*labels, quantile], seconds)
        # Queues live workers consume that have no jobs and no row yet.
        for name, count in sorted(consumers.items()):
            families.queue_workers.add_metric([name], float(count))
        yield from families.all()


def _replica(staleness: ReadStaleness) -> Iterator[Metric]:
    """How far behind its primary the replica read is (TASKQ_PG_DSN_REPLICA)."""
    streaming = _gauge(
        "replica_streaming",
        "1 while the replica these metrics read streams from its primary, 0 when it lost it "
        "(its numbers then age without bound).",
    )
    streaming.add_metric([], 1.0 if staleness.streaming else 0.0)
    yield streaming
    if staleness.behind is not None:
        lag = _gauge(
            "replica_lag",
            "Seconds the replica these metrics read was behind its primary (0: it had "
            "replayed all it received).",
            unit="seconds",
        )
        lag.add_metric([], staleness.behind)
        yield lag


class FleetMetrics:
    """The reader, its collector and a registry holding only it: what a server mounts.

    ``await metrics.exposition(accept)`` refreshes the snapshot (cached) and returns the
    content type and body for a ``GET /metrics`` with that Accept header (Prometheus text,
    or OpenMetrics when asked for).
    """

    def __init__(
        self, source: FleetSource, settings: FleetSettings, clock: Clock | None = None
    ) -> None:
        self.reader = FleetReader(source, settings, clock)
        self.collector = FleetCollector(self.reader)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)

    async def exposition(self, accept: str | None = None) -> tuple[str, bytes]:
        """(content type, body) of the fleet metrics, read at most once per interval."""
        await self.reader.snapshot()
        encoder, content_type = choose_encoder(accept or "")
        return content_type, encoder(self.registry)
