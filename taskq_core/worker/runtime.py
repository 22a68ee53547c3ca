"""Worker: wires the loops of one worker process into a TaskGroup and returns its exit code.

Start-up: validate DI, sync actor config (drift refuses the start), register the worker row,
log the bootstrap warnings. Then the siblings declared in ``siblings.py`` run in one
TaskGroup: producer, completer, heartbeat, leader election, the leader's services
(``leader_services.py``), the consumers, and the optional loops (the drain monitor in
until-idle mode among them). A sibling that raises, or returns while no shutdown is under
way, stops the worker. At exit the worker row is marked stopped and owned resources are
closed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from taskq_core.actor_config import sync_actor_configs
from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import Backend, WorkerInfo
from taskq_core.clock import Clock, SystemClock
from taskq_core.cron_schedules import sync_cron_schedules
from taskq_core.di import ProcessScopes, ProviderRegistry, Scope, split_annotation
from taskq_core.ids import uuid7
from taskq_core.obs.gauges import watch_worker
from taskq_core.obs.logs import get_logger
from taskq_core.obs.metrics import meters_for
from taskq_core.ratelimit.bootstrap import actor_limits, close_limiter, start_limiter
from taskq_core.ratelimit.gate import RateLimiter
from taskq_core.ratelimit.registry import RateLimitRegistry
from taskq_core.settings import TaskqSettings, settings_not_in_effect
from taskq_core.worker.active import ActiveJobs, LeaseTerms
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.collector import freeze_start_up, young_collections_spaced
from taskq_core.worker.completer import Completer
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.health import HealthServer
from taskq_core.worker.shutdown import ShutdownOrchestrator
from taskq_core.worker.siblings import SiblingContext, run_siblings, sibling_loops
from taskq_core.worker.stall import StallGuard, StallSensor
from taskq_core.worker.transient import DatabaseOutage, shielded
from taskq_core.worker.watchdog import LoopLagWatchdog, LoopLiveness, ShutdownWatchdog

_ACTOR_THREAD = "taskq-actor"  # the name prefix of the threads plain ``def`` actors run in


def _package_version() -> str | None:
    try:
        return version("taskq")
    except PackageNotFoundError:
        return None


class Worker:
    """One worker: ``await Worker(settings, registry).run()`` returns the process exit code."""

    # Alike di.py's Resolver constructor by shape only: typed parameters.
    def __init__(
        self,
        settings: TaskqSettings,
        registry: Mapping[str, ActorRef],
        *,
        backend: Backend | None = None,
        providers: ProviderRegistry | None = None,
        clock: Clock | None = None,
        until_idle: bool = False,
        install_signal_handlers: bool = True,
        rate_limits: RateLimitRegistry | None = None,
        stall_sensor: StallSensor | None = None,
    ) -> None:
        self.settings = settings
        self.registry = dict(registry)
        self.rate_limits = rate_limits  # None: from DI, else the module-level default
        self._backend = backend
        self._owns_backend = backend is None
        self.providers = providers or ProviderRegistry()
        self.clock = clock or SystemClock()
        self.until_idle = until_idle
        self.install_signal_handlers = install_signal_handlers
        # The event loop's stall sensor, when the loop was built with it (``run_worker``);
        # otherwise the heartbeat notices stalls by its own late wakes.
        self.stall_sensor = stall_sensor
        self.worker_id = settings.worker_id or uuid7()  # a workgroup child's is its supervisor's
        self.log = get_logger("worker").bind(worker_id=str(self.worker_id))
        self.deps: WorkerDeps | None = None
        self.shutdown: ShutdownOrchestrator | None = None
        self.started = asyncio.Event()
        # The process that started this one: a workgroup child stops when it changes (the
        # supervisor died), as a fallback where PR_SET_PDEATHSIG is not available.
        self._parent_pid = os.getppid()

    async def _open_backend(self) -> Backend:
        if self._backend is not None:
            return self._backend
        from taskq_core.backend.factory import Role, open_backend

        self._backend = await open_backend(self.settings, Role.WORKER)
        return self._backend

    def stop(self, reason: str = "requested") -> None:
        """Begin a graceful shutdown (safe to call more than once, or before start)."""
        if self.shutdown is not None:
            self.shutdown.request(reason)

    async def run(self) -> int:
        """Run until shutdown; return the exit code (0, 1, 3 or 4). Meanwhile the process's
        garbage collector runs its young passes less often (``collector``)."""
        with young_collections_spaced():
            return await self._run()

    async def _run(self) -> int:
        self.providers.validate(
            (f"actor {ref.name}", ref.dependency_params) for ref in self.registry.values()
        )
        limits = actor_limits(self.rate_limits, self.providers, self.registry.values())
        backend = await self._open_backend()
        try:
            await sync_actor_configs(
                backend,
                self.registry.values(),
                force=self.settings.force_update_actor_config,
                log=self.log,
            )
            await sync_cron_schedules(
                backend, self.registry.values(), until_idle=self.until_idle, log=self.log
            )
            limiter = await start_limiter(
                limits, self.settings, backend, clock=self.clock, log=self.log
            )
            deps = self._build_deps(backend, limiter)
            # Before the worker row exists: a socket another live worker serves refuses the
            # start (HealthSocketInUseError, exit 1) with nothing to clean up.
            health = await self._start_health(deps)
            try:
                deps.state.info = self._worker_info()
                await backend.register_worker(deps.state.info)
            except BaseException:
                if health is not None:
                    await health.stop()
                raise
            self._bootstrap_warnings()
            watchdogs = self._start_watchdogs(deps)
            try:
                with self._gauges(deps):
                    await self._run_siblings(deps)
            finally:
                # Every success made durable, waiting for the database while the shutdown
                # budget allows (the leader reclaims whatever stays unwritten).
                await shielded(deps.completer.close(within=self._write_budget(deps)))
                for task in watchdogs:
                    task.cancel()
                if health is not None:
                    await health.stop()
                await shielded(self._teardown(deps))
                started = deps.state.shutdown_started_at
                if started is not None:
                    deps.meters.shutdown_duration.record(deps.clock.monotonic() - started)
            return deps.state.exit_code
        finally:
            if self._owns_backend:
                await backend.close()

    def _gauges(self, deps: WorkerDeps) -> AbstractContextManager[None]:
        """The worker-state gauges report this worker while it runs (TASKQ_OTEL_ENABLED)."""
        return watch_worker(deps) if self.settings.otel_enabled else nullcontext()

    def _write_budget(self, deps: WorkerDeps) -> float:
        """Seconds left for the last writes: what the shutdown watchdog's budget leaves."""
        started = deps.state.shutdown_started_at
        elapsed = 0.0 if started is None else deps.clock.monotonic() - started
        return max(1.0, self.settings.termination_grace_period - elapsed - 2.0)

    def _build_deps(self, backend: Backend, limiter: RateLimiter | None = None) -> WorkerDeps:
        s = self.settings
        holdings = ActiveJobs(LeaseTerms(s.lock_lease, margin=s.heartbeat_interval))
        database = DatabaseOutage(self.clock, self.log, meters_for(s.otel_enabled))
        self.deps = WorkerDeps(
            worker_id=self.worker_id,
            settings=s,
            backend=backend,
            registry=self.registry,
            clock=self.clock,
            log=self.log,
            scopes=ProcessScopes(self.providers),
            executor=ThreadPoolExecutor(
                max_workers=s.max_concurrency, thread_name_prefix=_ACTOR_THREAD
            ),
            # Unbounded: the producer claims only up to capacity, and a held job that lost its
            # lease leaves the count while it still sits here, to be skipped.
            local_queue=asyncio.Queue(),
            # Keyword arguments, alike supervisor/exits.py's give_up, cron_schedules.py's wrap and
            # memory/schedules.py's _job_of by shape only: other calls, other data.
            completer=Completer(
                backend,
                self.worker_id,
                self.log,
                holdings=holdings,
                database=database,
                clock=self.clock,
                max_batch=s.completion_batch_max,
            ),
            database=database,
            active=holdings,
            limiter=limiter,
            liveness=LoopLiveness(
                self.clock,
                grace_factor=s.watchdog_tick_grace_factor,
                stale_floor=s.watchdog_stale_floor,
            ),
        )
        # A flush moves rows out of 'running': capped actors may have room again.
        self.deps.completer.on_flushed = self.deps.active.slot_freed.set
        self.shutdown = ShutdownOrchestrator(self.deps)
        return self.deps

    async def _start_health(self, deps: WorkerDeps) -> HealthServer | None:
        if not self.settings.health_enabled:
            return None
        server = HealthServer(deps, deps.liveness, self.settings.health_socket_path)
        try:
            await server.start()
        except OSError as exc:
            self.log.warning(
                "health_server_unavailable", path=server.path, error=f"{type(exc).__name__}: {exc}"
            )
            return None
        return server

    def _start_watchdogs(self, deps: WorkerDeps) -> list[asyncio.Task[Any]]:
        """Detectors 1 and 4 live outside the TaskGroup: a sibling crash must not cancel them."""
        s = self.settings
        if not s.watchdog_enabled:
            return []
        lag = LoopLagWatchdog(
            asyncio.get_running_loop(),
            deps.liveness,
            self.log,
            self.clock,
            budget=s.watchdog_loop_lag_budget,
            startup_grace=s.watchdog_loop_lag_startup_grace,
            check_interval=s.watchdog_check_interval,
        )
        lag.start()
        watchdog = ShutdownWatchdog(
            self.clock,
            self.log,
            budget=s.termination_grace_period,
            dump_interval=s.watchdog_dump_interval,
            dump_after_fraction=s.watchdog_dump_after_fraction,
        )
        deadline = asyncio.create_task(
            watchdog.run(lambda: deps.state.shutdown_started_at, deps.state.shutdown_begun),
            name="shutdown_watchdog",
        )
        deadline.add_done_callback(lambda _: lag.stop())
        return [deadline]

    def _worker_info(self) -> WorkerInfo:
        s = self.settings
        return WorkerInfo(
            id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=list(s.queues),
            actors=sorted(self.registry),
            concurrency=s.max_concurrency,
            label=s.worker_label,
            workgroup_instance=s.workgroup_instance,
            version=_package_version(),
        )

    def _bootstrap_warnings(self) -> None:
        session_bound = loop_scope_connections(self.providers, self.registry.values())
        if session_bound and self.settings.direct_dsn != self.settings.pooled_dsn:
            self.log.warning(
                "loop_scope_conn_dsn_mismatch",
                providers=session_bound,
                note="a LOOP-scope connection outlives transactions, which a transaction-mode "
                "PgBouncer does not keep on one server session; point TASKQ_PG_DSN_DIRECT and "
                "TASKQ_PG_DSN_POOLED at the same direct endpoint for this worker, or use "
                "ctx.connection() instead",
            )
        inert = settings_not_in_effect(self.settings)
        if inert:
            self.log.warning(
                "settings_not_in_effect",
                settings=inert,
                note="these settings are accepted but nothing reads them yet",
            )
        queues = set(self.settings.queues)
        if not queues:
            self.log.warning("worker_consumes_no_queues", worker_queues=[])
        # A workgroup child is judged with its group: its siblings consume the rest.
        covered = queues | set(self.settings.workgroup_queues or ())
        stranded = {
            ref.name: ref.queue for ref in self.registry.values() if ref.queue not in covered
        }
        if stranded:
            self.log.warning(
                "actors_on_unconsumed_queues",
                actors=stranded,
                queues=sorted(set(stranded.values())),
                worker_queues=sorted(queues),
                note="a real problem only when no other worker consumes those queues",
            )
        self.log.info(
            "worker_started",
            queues=sorted(queues),
            actors=sorted(self.registry),
            concurrency=self.settings.max_concurrency,
            # Claimed ahead of free consumers: TASKQ_PREFETCH, or paced up to the ceiling.
            prefetch="fixed" if self.settings.prefetch is not None else "paced",
            prefetch_max=self.settings.effective_prefetch,
            until_idle=self.until_idle,
        )

    async def _run_siblings(self, deps: WorkerDeps) -> None:
        """Run the declared sibling loops (``worker/siblings.py``) until the worker stops."""
        assert self.shutdown is not None
        if self.install_signal_handlers:
            self.shutdown.install_signal_handlers()
        controller = CancelController(deps)
        stall_guard = StallGuard(deps, controller)
        if self.stall_sensor is not None:
            self.stall_sensor.watch(stall_guard.threshold, stall_guard.stalled)
        context = SiblingContext(
            deps, self.shutdown, controller, stall_guard, self.until_idle, self._parent_pid
        )
        await run_siblings(deps, sibling_loops(context), self.started)

    async def _teardown(self, deps: WorkerDeps) -> None:
        try:
            await deps.backend.mark_worker_stopped(deps.worker_id)
        except Exception as exc:
            self.log.warning("worker_stop_record_failed", error=repr(exc))
        try:
            await deps.scopes.close()
            await close_limiter(deps.limiter)
        finally:
            deps.executor.shutdown(wait=False, cancel_futures=True)
        self.log.info("worker_stopped", exit_code=deps.state.exit_code, **vars(deps.state.stats))


def loop_scope_connections(providers: ProviderRegistry, actors: Iterable[ActorRef]) -> list[str]:
    """The asyncpg connections kept in LOOP scope: registered there, or asked for there by an
    actor's parameter. Told apart by module name: nothing above the backend imports asyncpg."""
    keys = list(providers.keys(Scope.LOOP))
    for ref in actors:
        for annotation in ref.dependency_params.values():
            key, scope = split_annotation(annotation)
            if scope is Scope.LOOP:
                keys.append(key)
    names = {
        f"{key.__module__}.{key.__qualname__}"
        for key in keys
        if isinstance(key, type) and key.__module__.split(".")[0] == "asyncpg"
    }
    return sorted(names)


def run_worker(
    settings: TaskqSettings,
    registry: Mapping[str, ActorRef],
    *,
    until_idle: bool = False,
    providers: ProviderRegistry | None = None,
) -> int:
    """Run a worker to completion on a fresh event loop (the CLI's entry point).

    An actor that ignored even its forced cancel (its job is recorded abandoned) cannot be
    stopped: a thread-run one keeps its thread, an async one that swallows cancellation keeps
    its task. The interpreter would wait for them at exit; the process exits at once
    instead, with the exit code the worker decided.
    """
    sensor = StallSensor()
    worker = Worker(
        settings, registry, until_idle=until_idle, providers=providers, stall_sensor=sensor
    )
    freeze_start_up()
    with asyncio.Runner(
        loop_factory=lambda: asyncio.SelectorEventLoop(sensor.selector())
    ) as runner:
        code = runner.run(worker.run())
        stuck = _unstoppable(runner.get_loop())
        if stuck:
            worker.log.warning(
                "worker_exiting_with_running_actors",
                actors=stuck,
                exit_code=code,
                note="abandoned actor bodies cannot be stopped; their jobs were recorded abandoned",
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return code


def _unstoppable(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Actor threads still running, and tasks that do not end within a second of a cancel."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
    names = [task.get_name() for task in tasks if not task.done()]
    names += [
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith(_ACTOR_THREAD) and thread.is_alive()
    ]
    return names
