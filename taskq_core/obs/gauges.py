"""The worker-state gauges: OpenTelemetry observable gauges read from the running workers.

Each gauge is registered once per process on the global meter (``watch_worker`` does it on first
use), with a callback that reads whatever is watched when the meter is collected (an export, a
``/metrics`` scrape): the running workers (``WatchedWorker``, which a worker's ``WorkerDeps``
is: obs reads the worker through that protocol and never imports it) and the open LISTEN
connections. A worker is watched from its start to its exit, so a stopped worker's state is
never reported and nothing it held stays referenced. Collection may run on another thread (an
exporter's); the callbacks only read counters and flags, on a snapshot of the watch list.

One process normally runs one worker. When it runs several (tests, an embedding
application), their gauges are combined: counts add up, ``is_leader`` is 1 when any leads,
``database_available`` is 0 when any sees the database away, the shutdown phase and the
tick ages are the largest.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, ObservableGauge, Observation

from taskq_core.obs.metrics import CATALOGUE, INSTRUMENTATION, labels


@dataclass(frozen=True)
class LeaderSample:
    """What the leader read for the fleet gauges: jobs per (queue, status), and reservation
    slots held per reservation."""

    depths: dict[tuple[str, str], int] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)


class _Outage(Protocol):
    @property
    def ongoing(self) -> bool: ...


class _Event(Protocol):
    def is_set(self) -> bool: ...


class _Backlog(Protocol):
    def qsize(self) -> int: ...


class _Liveness(Protocol):
    def ages(self) -> dict[str, float]: ...


# _RunState and WatchedWorker: read-only Protocols, alike each other and protocol/history.py's
# SucceededJob by shape only (other properties).
class _RunState(Protocol):
    """A worker's run state as the gauges read it (``worker.state.WorkerState``)."""

    @property
    def is_leader(self) -> _Event: ...
    @property
    def shutdown_phase(self) -> int: ...
    @property
    def leader_sample(self) -> LeaderSample | None: ...


class WatchedWorker(Protocol):
    """A running worker as the gauges read it (``worker.deps.WorkerDeps``)."""

    @property
    def active(self) -> Sized: ...
    @property
    def local_queue(self) -> _Backlog: ...
    @property
    def database(self) -> _Outage: ...
    @property
    def liveness(self) -> _Liveness: ...
    @property
    def state(self) -> _RunState: ...


class NotifySource(Protocol):
    """A LISTEN connection as the ``taskq.notify.connected`` gauge sees it."""

    @property
    def connected(self) -> bool: ...


_workers: list[WatchedWorker] = []
_listeners: weakref.WeakSet[NotifySource] = weakref.WeakSet()

Callback = Callable[[CallbackOptions], Iterable[Observation]]


def _one(value: float) -> list[Observation]:
    return [Observation(value)]


def _active_jobs(_: CallbackOptions) -> list[Observation]:
    workers = list(_workers)
    return _one(sum(len(deps.active) for deps in workers)) if workers else []


def _local_queue_jobs(_: CallbackOptions) -> list[Observation]:
    workers = list(_workers)
    return _one(sum(deps.local_queue.qsize() for deps in workers)) if workers else []


def _database_available(_: CallbackOptions) -> list[Observation]:
    workers = list(_workers)
    return _one(0 if any(deps.database.ongoing for deps in workers) else 1) if workers else []


def _is_leader(_: CallbackOptions) -> list[Observation]:
    workers = list(_workers)
    return (
        _one(1 if any(deps.state.is_leader.is_set() for deps in workers) else 0) if workers else []
    )


def _shutdown_phase(_: CallbackOptions) -> list[Observation]:
    workers = list(_workers)
    return _one(max(int(deps.state.shutdown_phase) for deps in workers)) if workers else []


def _notify_connected(_: CallbackOptions) -> list[Observation]:
    listeners = list(_listeners)
    return _one(1 if all(lis.connected for lis in listeners) else 0) if listeners else []


def _loop_tick_ages(_: CallbackOptions) -> list[Observation]:
    ages: dict[str, float] = {}
    for deps in list(_workers):
        for loop, age in deps.liveness.ages().items():
            ages[loop] = max(age, ages.get(loop, 0.0))
    return [Observation(age, labels(loop=loop)) for loop, age in sorted(ages.items())]


def _leader_samples() -> list[LeaderSample]:
    """The samples of the workers that lead now (a former leader's sample is stale)."""
    samples = []
    for deps in list(_workers):
        sample = deps.state.leader_sample
        if sample is not None and deps.state.is_leader.is_set():
            samples.append(sample)
    return samples


def _queue_depth(_: CallbackOptions) -> list[Observation]:
    depths: dict[tuple[str, str], int] = {}
    for sample in _leader_samples():
        for key, count in sample.depths.items():
            depths[key] = depths.get(key, 0) + count
    return [
        Observation(count, labels(**{"messaging.destination.name": queue,
                                     "taskq.job.status": status}))
        for (queue, status), count in sorted(depths.items())
    ]  # fmt: skip


def _reservation_slots_held(_: CallbackOptions) -> list[Observation]:
    held: dict[str, int] = {}
    for sample in _leader_samples():
        for name, count in sample.slots.items():
            held[name] = held.get(name, 0) + count
    return [
        Observation(count, labels(**{"taskq.reservation": name}))
        for name, count in sorted(held.items())
    ]


CALLBACKS: dict[str, Callback] = {
    "active_jobs": _active_jobs,
    "local_queue_jobs": _local_queue_jobs,
    "database_available": _database_available,
    "is_leader": _is_leader,
    "shutdown_phase": _shutdown_phase,
    "notify_connected": _notify_connected,
    "loop_tick_age": _loop_tick_ages,
    "queue_depth": _queue_depth,
    "reservation_slots_held": _reservation_slots_held,
}


def create_gauges(meter: Meter) -> dict[str, ObservableGauge]:
    """Every observable gauge of the catalogue, on ``meter``."""
    return {
        spec.key: meter.create_observable_gauge(
            spec.name,
            callbacks=[CALLBACKS[spec.key]],
            unit=spec.unit,
            description=spec.description,
        )
        for spec in CATALOGUE
        if spec.kind == "gauge"
    }


@cache
def _install() -> dict[str, ObservableGauge]:
    """The gauges on the global meter, once per process."""
    return create_gauges(metrics.get_meter(INSTRUMENTATION))


@contextmanager
def watch_worker(deps: WatchedWorker) -> Iterator[None]:
    """Report ``deps`` in the gauges while inside (a worker's run)."""
    _install()
    _workers.append(deps)
    try:
        yield
    finally:
        # By identity: WorkerDeps is a dataclass, and == would compare every field.
        _workers[:] = [watched for watched in _workers if watched is not deps]


def watch_listener(listener: NotifySource) -> None:
    """Report a LISTEN connection in ``taskq.notify.connected`` until ``forget_listener``
    (or until it is garbage: the set holds it weakly)."""
    _install()
    _listeners.add(listener)


def forget_listener(listener: NotifySource) -> None:
    """Stop reporting a closed LISTEN connection."""
    _listeners.discard(listener)
