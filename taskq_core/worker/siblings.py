"""The worker's sibling loops, declared: which run always, which only when switched on,
and how one crash or early return stops them all.

A worker's TaskGroup holds the fixed loops (producer, completer, heartbeat, leader
election, the loop-lag sampler), the leader's services (``leader_services.LEADER_SERVICES``,
each gated on leadership inside its loop), one consumer per TASKQ_MAX_CONCURRENCY, and the
optional loops (the drain monitor in until-idle mode, the parent watch of a workgroup child,
the stale-loop watchdog). A sibling that raises, or returns while no shutdown is under way,
stops the worker with exit code 1 (``sibling_crashed``, ``sibling_contract_violated``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskq_core.constants import EXIT_ERROR
from taskq_core.obs.metrics import labels
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.consumer import ConsumerLoop
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.drain import DrainMonitor
from taskq_core.worker.heartbeat import HeartbeatLoop
from taskq_core.worker.leader import LeaderElection
from taskq_core.worker.leader_services import LEADER_SERVICES
from taskq_core.worker.loop_lag import LoopLagSampler
from taskq_core.worker.parent import ParentWatch
from taskq_core.worker.producer import ProducerLoop
from taskq_core.worker.shutdown import ShutdownOrchestrator
from taskq_core.worker.stall import StallGuard
from taskq_core.worker.watchdog import stale_loop_watchdog

Loop = Callable[[], Awaitable[Any]]


class SiblingContractError(RuntimeError):
    """A long-lived loop returned while the worker was not shutting down."""


@dataclass(frozen=True)
class SiblingContext:
    """What the sibling loops of one worker are built from."""

    deps: WorkerDeps
    shutdown: ShutdownOrchestrator
    controller: CancelController
    stall_guard: StallGuard
    until_idle: bool
    parent_pid: int  # the process that started this one (a workgroup's supervisor)


@dataclass(frozen=True)
class Sibling:
    """One named loop: ``build`` makes it, when ``enabled`` says so."""

    name: str
    build: Callable[[SiblingContext], Loop]
    enabled: Callable[[SiblingContext], bool] = lambda _: True


def _completer(ctx: SiblingContext) -> Loop:
    return lambda: ctx.deps.completer.run(ctx.deps.state.shutdown_event)


def _stale_loop_watchdog(ctx: SiblingContext) -> Loop:
    deps = ctx.deps
    return lambda: stale_loop_watchdog(
        deps.liveness,
        deps.log,
        check_interval=deps.settings.watchdog_check_interval,
        shutdown=deps.state.shutdown_event,
    )


FIXED_SIBLINGS: tuple[Sibling, ...] = (
    Sibling("producer", lambda ctx: ProducerLoop(ctx.deps).run),
    Sibling("completer", _completer),
    Sibling("heartbeat", lambda ctx: HeartbeatLoop(ctx.deps, ctx.controller, ctx.stall_guard).run),
    Sibling("leader_election", lambda ctx: LeaderElection(ctx.deps).run),
    Sibling("loop_lag", lambda ctx: LoopLagSampler(ctx.deps).run),
)

OPTIONAL_SIBLINGS: tuple[Sibling, ...] = (
    Sibling(
        "drain_monitor",
        lambda ctx: DrainMonitor(ctx.deps, ctx.shutdown.request).run,
        enabled=lambda ctx: ctx.until_idle,
    ),
    Sibling(
        "parent_watch",
        lambda ctx: ParentWatch(ctx.deps, ctx.parent_pid, ctx.shutdown.request).run,
        enabled=lambda ctx: ctx.deps.settings.workgroup_instance is not None,
    ),
    Sibling(
        "stale_loop_watchdog",
        _stale_loop_watchdog,
        enabled=lambda ctx: ctx.deps.settings.watchdog_enabled,
    ),
)


def sibling_loops(ctx: SiblingContext) -> dict[str, Loop]:
    """Every loop of this worker by name, in the order they start."""
    deps, settings = ctx.deps, ctx.deps.settings
    loops = {sibling.name: sibling.build(ctx) for sibling in FIXED_SIBLINGS}
    for service in LEADER_SERVICES:
        if service.enabled(settings):
            loops[service.name] = service.loop(deps)
    for index in range(settings.max_concurrency):
        loops[f"consumer-{index}"] = ConsumerLoop(deps, index).run
    for sibling in OPTIONAL_SIBLINGS:
        if sibling.enabled(ctx):
            loops[sibling.name] = sibling.build(ctx)
    return loops


async def run_siblings(deps: WorkerDeps, loops: dict[str, Loop], started: asyncio.Event) -> None:
    """Run ``loops`` in one TaskGroup until they all end; a crash sets ``deps.state.exit_code``."""
    try:
        async with asyncio.TaskGroup() as group:
            for name, loop in loops.items():
                group.create_task(_supervised(deps, name, loop), name=name)
            started.set()
    except* SiblingContractError as violations:
        deps.state.exit_code = EXIT_ERROR
        for error in violations.exceptions:
            deps.log.critical("sibling_contract_violated", error=str(error))
    except* Exception as crashes:
        deps.state.exit_code = EXIT_ERROR
        for crash in crashes.exceptions:
            deps.log.critical("sibling_crashed", error=repr(crash), exc_info=crash)


async def _supervised(deps: WorkerDeps, name: str, loop: Loop) -> None:
    """Run one sibling; a crash or an early return stops the whole worker."""
    try:
        await loop()
    except asyncio.CancelledError:
        raise
    except BaseException:
        deps.meters.sibling_crashes.add(1, labels(loop=name))
        deps.state.producer_stop.set()
        deps.state.consumer_stop.set()
        deps.state.shutdown_event.set()
        raise
    if (
        not deps.state.shutdown_event.is_set()
        and not (name == "producer" and deps.state.producer_stop.is_set())
        and not (name.startswith("consumer-") and deps.state.consumer_stop.is_set())
    ):
        deps.meters.sibling_crashes.add(1, labels(loop=name))
        deps.state.shutdown_event.set()
        raise SiblingContractError(f"{name} returned while the worker was running")
