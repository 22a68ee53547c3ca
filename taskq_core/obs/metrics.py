"""Every OpenTelemetry metric instrument TaskQ records, in one catalogue.

TaskQ only uses the OpenTelemetry API; the application, ``taskq worker`` (``obs.telemetry``)
or a test installs the SDK. Without one, every call is a cheap no-op. ``CATALOGUE`` names
each instrument once (name, kind, unit, attributes); ``instruments()`` creates the counters
and histograms on the global meter, and ``obs.gauges`` registers the observable gauges with
callbacks that read the running workers. docs/metrics.md lists the same catalogue with the
Prometheus names and when each is recorded (a test holds the two together).

Attribute names follow the messaging semantic conventions where they apply
(``messaging.system``, ``messaging.destination.name``, ``messaging.consumer.group.name``),
and ``taskq.*`` elsewhere. The per-job attribute sets are built once per (actor, queue,
outcome) and cached: recording a job costs two instrument calls and a cache lookup.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Literal

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, Meter

INSTRUMENTATION = "taskq"
SYSTEM = "taskq"  # messaging.system

Kind = Literal["counter", "histogram", "gauge"]
Attributes = Mapping[str, str]

# Histogram bucket boundaries (seconds). The SDK's default boundaries are sized for
# milliseconds: every dispatch (a few ms) would land in the first bucket.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
JOB_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0, 3600.0,
)  # fmt: skip
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
PASS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
OUTAGE_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
SHUTDOWN_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 75.0, 90.0, 120.0)


@dataclass(frozen=True)
class Spec:
    """One instrument: ``key`` is its field on ``Instruments`` (or its gauge's key)."""

    key: str
    name: str
    kind: Kind
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None


_JOB = ("messaging.system", "messaging.destination.name", "messaging.consumer.group.name",
        "taskq.actor", "taskq.outcome")  # fmt: skip

# One Spec per instrument: the rows are alike by shape only, each describing its own.
CATALOGUE: tuple[Spec, ...] = (
    # --- dispatch and execution (the hot path) ------------------------------------------
    Spec("dispatch_duration", "taskq.dispatch.duration", "histogram", "s",
         "Latency of one dispatch_batch call (the claim of due jobs)",
         ("messaging.system", "messaging.consumer.group.name"), FAST_BUCKETS),
    Spec("dispatched_jobs", "taskq.dispatch.jobs", "counter", "{job}",
         "Jobs claimed by this worker's dispatches",
         ("messaging.system", "messaging.destination.name", "messaging.consumer.group.name")),
    Spec("process_duration", "messaging.process.duration", "histogram", "s",
         "Full actor execution: payload validation to the outcome handed to its writer",
         _JOB, JOB_BUCKETS),
    Spec("consumed_messages", "messaging.client.consumed.messages", "counter", "{message}",
         "Jobs this worker finished, by outcome", _JOB),
    Spec("sent_messages", "messaging.client.sent.messages", "counter", "{message}",
         "Jobs enqueued by JobsClient",
         ("messaging.system", "messaging.destination.name", "taskq.actor")),
    Spec("backpressure_errors", "taskq.backpressure.errors", "counter", "{error}",
         "Enqueues refused by max_pending (MaxPendingExceededError)",
         ("taskq.actor", "taskq.enqueue.kind")),
    Spec("rate_limit_denials", "taskq.rate_limit.denials", "counter", "{job}",
         "Claimed jobs a rate limit, reservation or queue cap sent back to wait",
         ("taskq.actor", "taskq.rate_limit.kind")),
    # --- cancellation and leases ----------------------------------------------------------
    Spec("cancellation_requested", "taskq.cancellation.requested", "counter", "{request}",
         "JobsClient.cancel() calls, whatever their outcome"),
    Spec("cancellation_phase_transitions", "taskq.cancellation.phase_transitions", "counter",
         "{transition}", "Cancel phase changes of running jobs",
         ("taskq.cancel.phase", "taskq.cancel.reason")),
    Spec("leases_lost", "taskq.lease.lost", "counter", "{job}",
         "Held jobs whose lease this worker lost (nothing is written for them)",
         ("taskq.lease.reason",)),
    Spec("isolations", "taskq.worker.isolations", "counter", "{isolation}",
         "Times the worker gave up its jobs after losing its heartbeat"),
    Spec("stalls", "taskq.worker.stalls", "counter", "{stall}",
         "Times the process or its event loop did not run for longer than a heartbeat"),
    Spec("heartbeat_duration", "taskq.heartbeat.duration", "histogram", "s",
         "Latency of one heartbeat (the worker row, the held leases, the cancel flags)",
         (), FAST_BUCKETS),
    # --- NOTIFY ---------------------------------------------------------------------------
    Spec("notify_received", "taskq.notify.received", "counter", "{notification}",
         "NOTIFY callbacks received on the LISTEN connection", ("taskq.notify.channel",)),
    Spec("notify_cancel_received", "taskq.notify.cancel_received", "counter",
         "{notification}", "Cancel notifications delivered to this worker"),
    Spec("notify_reconnects", "taskq.notify.reconnects", "counter", "{reconnect}",
         "LISTEN connection reconnects"),
    # --- the database ---------------------------------------------------------------------
    Spec("database_outages", "taskq.database.outages", "counter", "{outage}",
         "Database outages this worker saw begin (by the loop that saw it first)",
         ("loop",)),
    Spec("database_outage_duration", "taskq.database.outage.duration", "histogram", "s",
         "Length of each database outage, recorded when it ends", (), OUTAGE_BUCKETS),
    Spec("database_retried_calls", "taskq.database.retried_calls", "counter", "{call}",
         "Database calls retried without an outage (a lost race, a statement timeout)",
         ("loop",)),
    # --- leadership and the leader's sweeps -----------------------------------------------
    Spec("leader_elected", "taskq.maintenance_leader.elected", "counter", "{election}",
         "Times this worker became the maintenance leader"),
    Spec("leader_lost", "taskq.maintenance_leader.lost", "counter", "{loss}",
         "Times this worker stopped leading while running"),
    Spec("leader_loop_errors", "taskq.worker.leader_loop_unexpected_errors_total", "counter",
         "{error}", "Unexpected (non-transient) errors tolerated by a leader loop",
         ("loop",)),
    Spec("maintenance_duration", "taskq.maintenance.duration", "histogram", "s",
         "Duration of one pass of a leader loop", ("loop",), PASS_BUCKETS),
    Spec("reclaimed_jobs", "taskq.reclaim.jobs", "counter", "{job}",
         "Expired leases settled by the reclaim sweep (pending again, crashed, cancelled, "
         "or failed as a poison job)"),
    Spec("deadline_failed", "taskq.deadline_exceeded_sweep.jobs_failed", "counter", "{job}",
         "Waiting jobs failed by the deadline sweep (schedule_to_close passed)"),
    Spec("scheduled_promoted", "taskq.scheduled.promoted", "counter", "{job}",
         "Scheduled jobs made pending when due"),
    Spec("results_expired", "taskq.results.expired", "counter", "{job}",
         "Job results cleared after their result_ttl"),
    Spec("leaked_slots_freed", "taskq.reservation.leaked_slots_freed", "counter", "{slot}",
         "Reservation slots freed by the leaked-slot sweep (lease run out, or their job ended)"),
    Spec("batches_ended", "taskq.batches.ended", "counter", "{batch}",
         "Batches ended (complete or aborted), by the batch hook or the stale sweep",
         ("taskq.batch.status", "taskq.batch.ended_by")),
    Spec("pruned_jobs", "taskq.prune.jobs_archived", "counter", "{job}",
         "Terminal jobs moved to the archive by the prune",
         ("taskq.job.status", "messaging.destination.name")),
    Spec("pruned_batches", "taskq.prune.batches_deleted", "counter", "{batch}",
         "Ended batch rows deleted after the prune"),
    Spec("archive_expired", "taskq.archive_expiry.jobs_deleted", "counter", "{job}",
         "Archived jobs deleted at their expire_at by the archive expiry"),
    Spec("stale_workers_deleted", "taskq.workers.stale_deleted", "counter", "{worker}",
         "Worker rows deleted after a long silence"),
    # --- the worker's life ----------------------------------------------------------------
    Spec("loop_errors", "taskq.worker.loop_unexpected_errors_total", "counter", "{error}",
         "Unexpected errors tolerated by a worker loop that is not a leader loop",
         ("loop",)),
    Spec("sibling_crashes", "taskq.worker.sibling_crashes_total", "counter", "{crash}",
         "Worker loops that raised or returned early, stopping the worker", ("loop",)),
    Spec("watchdog_trips", "taskq.worker.watchdog_trips_total", "counter", "{trip}",
         "Watchdog trips leading to a forced exit", ("detector",)),
    Spec("shutdown_duration", "taskq.worker.shutdown_duration_seconds", "histogram", "s",
         "From the first shutdown signal to the worker's exit", (), SHUTDOWN_BUCKETS),
    Spec("loop_lag", "taskq.worker.loop_lag", "histogram", "s",
         "How much later than due the event loop woke a 50 ms timer", (), LAG_BUCKETS),
    # --- observable gauges (obs.gauges) ---------------------------------------------------
    Spec("active_jobs", "taskq.active_jobs", "gauge", "{job}",
         "Jobs whose bodies run on this worker now"),
    Spec("local_queue_jobs", "taskq.local_queue.jobs", "gauge", "{job}",
         "Jobs claimed and waiting in the worker's local queue for a consumer"),
    Spec("database_available", "taskq.database.available", "gauge", "1",
         "0 while this worker sees the database away, else 1"),
    Spec("is_leader", "taskq.maintenance_leader.is_leader", "gauge", "1",
         "1 while this worker holds the maintenance leader lock"),
    Spec("shutdown_phase", "taskq.shutdown_phase", "gauge", "1",
         "Shutdown phase: 0 none, 1 draining, 2 cancelling, 3 forcing, 4 abandoning"),
    Spec("notify_connected", "taskq.notify.connected", "gauge", "1",
         "1 while the LISTEN connection is healthy"),
    Spec("loop_tick_age", "taskq.worker.loop_tick_age_seconds", "gauge", "s",
         "Seconds since each interval-driven loop last ticked", ("loop",)),
    Spec("queue_depth", "taskq.queue.depth", "gauge", "{job}",
         "Jobs per queue and status, sampled by the leader every 15 s",
         ("messaging.destination.name", "taskq.job.status")),
    Spec("reservation_slots_held", "taskq.reservation.slots_held", "gauge", "{slot}",
         "Reservation slots held, by reservation, sampled by the leader every 15 s",
         ("taskq.reservation",)),
)  # fmt: skip

SPECS: dict[str, Spec] = {spec.key: spec for spec in CATALOGUE}


@dataclass(frozen=True)
class Instruments:
    """The counters and histograms of ``CATALOGUE`` (the gauges live in ``obs.gauges``)."""

    # One field per counter or histogram of CATALOGUE, in its order (alike by shape only).
    dispatch_duration: Histogram
    dispatched_jobs: Counter
    process_duration: Histogram
    consumed_messages: Counter
    sent_messages: Counter
    backpressure_errors: Counter
    rate_limit_denials: Counter
    cancellation_requested: Counter
    cancellation_phase_transitions: Counter
    leases_lost: Counter
    isolations: Counter
    stalls: Counter
    heartbeat_duration: Histogram
    notify_received: Counter
    notify_cancel_received: Counter
    notify_reconnects: Counter
    database_outages: Counter
    database_outage_duration: Histogram
    database_retried_calls: Counter
    leader_elected: Counter
    leader_lost: Counter
    leader_loop_errors: Counter
    maintenance_duration: Histogram
    reclaimed_jobs: Counter
    deadline_failed: Counter
    scheduled_promoted: Counter
    results_expired: Counter
    leaked_slots_freed: Counter
    batches_ended: Counter
    pruned_jobs: Counter
    pruned_batches: Counter
    archive_expired: Counter
    stale_workers_deleted: Counter
    loop_errors: Counter
    sibling_crashes: Counter
    watchdog_trips: Counter
    shutdown_duration: Histogram
    loop_lag: Histogram


def create_instruments(meter: Meter) -> Instruments:
    """Every counter and histogram of the catalogue, on ``meter``."""
    made: dict[str, Any] = {}
    for spec in CATALOGUE:
        if spec.kind == "counter":
            made[spec.key] = meter.create_counter(
                spec.name, unit=spec.unit, description=spec.description
            )
        elif spec.kind == "histogram":
            made[spec.key] = meter.create_histogram(
                spec.name,
                unit=spec.unit,
                description=spec.description,
                explicit_bucket_boundaries_advisory=list(spec.buckets or ()) or None,
            )
    return Instruments(**made)


@cache
def instruments() -> Instruments:
    """The instruments, created once on the global meter provider (a provider installed
    later still receives them: the API's proxy instruments forward once it is set)."""
    return create_instruments(metrics.get_meter(INSTRUMENTATION))


@cache
def disabled_instruments() -> Instruments:
    """Instruments that record nothing, for a worker with TASKQ_OTEL_ENABLED=false."""
    return create_instruments(metrics.NoOpMeter(INSTRUMENTATION))


def meters_for(enabled: bool) -> Instruments:
    """The instruments a worker records with: real ones, or none when TASKQ_OTEL_ENABLED is
    false."""
    return instruments() if enabled else disabled_instruments()


def meter_installed() -> bool:
    """Whether an SDK meter provider is installed (the default is a proxy recording nothing)."""
    return type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"


def flush(timeout: float = 1.0) -> None:
    """Push what the SDK holds to its exporters now (a watchdog trip exits the process with
    no unwinding, so a push exporter would never send the trip). Waits ``timeout`` seconds
    at most: an exporter's own request timeout is longer, and the exit must not wait on it."""

    def push() -> None:
        for provider in (metrics.get_meter_provider(), trace.get_tracer_provider()):
            force_flush = getattr(provider, "force_flush", None)
            if force_flush is not None:
                try:
                    force_flush(timeout_millis=int(timeout * 1000))
                except Exception:  # best effort on the way out
                    pass

    pusher = threading.Thread(target=push, name="taskq-telemetry-flush", daemon=True)
    pusher.start()
    pusher.join(timeout)


# --- attribute sets, built once ---------------------------------------------------------


@lru_cache(maxsize=4096)
def job_attributes(actor: str, queue: str, outcome: str, group: str) -> Attributes:
    """The attributes of one finished job's duration and count."""
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.consumer.group.name": group,
        "taskq.actor": actor,
        "taskq.outcome": outcome,
    }


@lru_cache(maxsize=256)
def worker_attributes(group: str) -> Attributes:
    """The attributes of a worker's dispatch duration."""
    return {"messaging.system": SYSTEM, "messaging.consumer.group.name": group}


@lru_cache(maxsize=4096)
def queue_attributes(queue: str, group: str) -> Attributes:
    """The attributes of jobs claimed from ``queue``."""
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.consumer.group.name": group,
    }


@lru_cache(maxsize=4096)
def sent_attributes(queue: str, actor: str) -> Attributes:
    """The attributes of jobs enqueued into ``queue`` for ``actor``."""
    return {"messaging.system": SYSTEM, "messaging.destination.name": queue, "taskq.actor": actor}


@lru_cache(maxsize=1024)
def labels(**values: str) -> Attributes:
    """A cached attribute set for the rarer events (``labels(loop=name)``)."""
    return dict(values)


def count_sent(destinations: Iterable[tuple[str, str]]) -> None:
    """Jobs enqueued, as (queue, actor) pairs. The pairs are only walked while a meter
    provider is installed: a bulk enqueue pays for the tally only when someone reads it."""
    if not meter_installed():
        return
    counter = instruments().sent_messages
    for (queue, actor), count in Tally(destinations).items():
        counter.add(count, sent_attributes(queue, actor))


def count_batch_end(meters: Instruments, status: str, ended_by: str) -> None:
    """One batch ended (``complete`` or ``aborted``) by the hook or the stale sweep."""
    meters.batches_ended.add(
        1, labels(**{"taskq.batch.status": status, "taskq.batch.ended_by": ended_by})
    )


# Where finished jobs go instead of the SDK instruments when only /metrics reads the meters
# (obs.job_tally.count_jobs_locally: two SDK calls per job cost a quarter of a no-op drain).
_job_sink: Callable[[str, str, str, str, float], None] | None = None


def set_job_sink(sink: Callable[[str, str, str, str, float], None] | None) -> None:
    """Send ``record_job`` to ``sink`` (None: to the SDK instruments)."""
    global _job_sink
    _job_sink = sink


def record_job(actor: str, queue: str, outcome: str, group: str, seconds: float) -> None:
    """One finished job: its execution time and its count, by outcome."""
    if _job_sink is not None:
        _job_sink(actor, queue, outcome, group, seconds)
        return
    meters = instruments()
    attributes = job_attributes(actor, queue, outcome, group)
    meters.process_duration.record(seconds, attributes)
    meters.consumed_messages.add(1, attributes)
