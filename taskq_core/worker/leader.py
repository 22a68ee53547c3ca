"""Leader election and the maintenance loops that only the leader runs.

A worker is a follower or the leader. Every worker campaigns once per heartbeat interval
(``try_acquire_leadership`` with TASKQ_LOCK_LEASE as the lease; Postgres: a session advisory
lock on a dedicated connection whose ``idle_session_timeout`` is the lease). A won campaign
makes it the leader (``deps.state.is_leader``) and records when it began
(``deps.state.leader_renewed_at``); a lost one, or the database away, makes it a follower again.

The leadership is a lease the leader must keep renewing. Locally it lapses at the start of
the last renewal that succeeded + the lease - one heartbeat interval (``leadership_lapsed``):
past that, no leader loop starts a pass, and the worker steps down (``leader_lease_lapsed``,
``drop_lapsed_leadership``) and campaigns again. That is what a leader resumed from a freeze
(SIGSTOP, a VM pause) does before anything else. On the server, the session of a leader that
sends nothing for one whole lease is ended with its lock, so another worker wins within a
heartbeat interval after that: the frozen leader's local lapse always comes first. A killed
leader's session ends at once, and so does its lock.

While it leads, the leader's services run (declared, with their cadences, in
``leader_services.py``; one module per sweep in ``sweeps/``): those on an interval through
``run_gated`` (scheduled promotion, the ``sweeps`` loop's lease and cleanup passes, cron
fires, the stranded-queue check, the stale-worker cleanup, the vacuum and the queue-depth
sample), the prune and the archive expiry at the fire times of their schedules through
``run_scheduled``. Each loop handles its own failures: a transient database error retries
with backoff, an unexpected one is logged and counted, five in a row end the worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from taskq_core.cron_timing import Schedule
from taskq_core.obs.metrics import labels
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import progress_period
from taskq_core.worker.transient import (
    TRANSIENT_ERRORS,
    Backoff,
    UnexpectedErrorGuard,
    retry_pause,
    shielded,
)
from taskq_core.worker.waits import wait_any


def leadership_lapsed(deps: WorkerDeps) -> bool:
    """Whether this worker holds leadership on a lease it can no longer vouch for: its last
    renewal that succeeded began a lease minus one heartbeat interval ago, or longer (the
    process or its loop was stopped, or its campaigns failed meanwhile)."""
    if not deps.state.is_leader.is_set():
        return False
    settings = deps.settings
    deadline = deps.state.leader_renewed_at + settings.lock_lease - settings.heartbeat_interval
    return deps.clock.monotonic() >= deadline


def drop_lapsed_leadership(deps: WorkerDeps) -> None:
    """Step down when the lease lapsed (``leadership_lapsed``): clear ``is_leader`` and log
    ``leader_lease_lapsed``; nothing otherwise. The next campaign decides who leads."""
    if not leadership_lapsed(deps):
        return
    deps.state.is_leader.clear()
    deps.log.warning(
        "leader_lease_lapsed",
        worker_id=str(deps.worker_id),
        since_renewal=round(deps.clock.monotonic() - deps.state.leader_renewed_at, 3),
        lease=deps.settings.lock_lease,
    )
    deps.meters.leader_lost.add(1)


def still_leading(deps: WorkerDeps) -> bool:
    """Whether a leader loop may start a pass now: this worker leads on a live lease (a lapsed
    one is dropped here)."""
    drop_lapsed_leadership(deps)
    return deps.state.is_leader.is_set()


class LeaderElection:
    """Campaigns for leadership every heartbeat interval and mirrors it in ``is_leader``."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self._guard = UnexpectedErrorGuard(
            "leader_election", deps.log, leader=True, meters=deps.meters
        )

    async def run_once(self) -> bool:
        """One campaign; returns whether this worker leads now. It returns only once the
        database answered (database trouble raises): a lost campaign is not an outage."""
        deps = self.deps
        drop_lapsed_leadership(deps)  # a resumed leader steps down before anything else
        began = deps.clock.monotonic()
        leading = await deps.backend.try_acquire_leadership(
            deps.worker_id, lease=deps.settings.lock_lease_delta
        )
        if leading:
            deps.state.leader_renewed_at = began
        if leading and not deps.state.is_leader.is_set():
            deps.state.leader_since = deps.clock.monotonic()
            deps.state.is_leader.set()
            deps.log.info("leader_elected", worker_id=str(deps.worker_id))
            deps.meters.leader_elected.add(1)
        elif not leading:
            self._step_down()
        return leading

    def _step_down(self) -> None:
        deps = self.deps
        if deps.state.is_leader.is_set():
            deps.state.is_leader.clear()
            deps.log.warning("leader_lost", worker_id=str(deps.worker_id))
            deps.meters.leader_lost.add(1)

    async def run(self) -> None:
        """Campaign until shutdown, then resign."""
        deps = self.deps
        try:
            while not deps.state.shutdown_event.is_set():
                deps.liveness.tick("leader_election", period=deps.settings.heartbeat_interval)
                try:
                    await self.run_once()
                    deps.database.succeeded()  # the campaign's statement answered
                    self._guard.succeeded()
                except TRANSIENT_ERRORS as exc:
                    self._step_down()
                    deps.database.failed("leader_election", exc)
                    # Campaign again as soon as the database is back, not a whole tick later.
                    await retry_pause(
                        deps.database, deps.settings.heartbeat_interval, deps.state.shutdown_event
                    )
                    continue
                except Exception as exc:
                    self._step_down()
                    self._guard.failed(exc)
                await wait_or_shutdown(deps, deps.settings.heartbeat_interval)
        finally:
            deps.liveness.forget("leader_election")
            deps.state.is_leader.clear()
            try:
                await shielded(deps.backend.release_leadership(deps.worker_id))
            except Exception as exc:
                deps.log.warning("leader_release_failed", error=repr(exc))


async def run_gated(
    deps: WorkerDeps,
    name: str,
    interval: float,
    step: Callable[[], Awaitable[Any]],
    pause: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Run ``step`` every ``interval`` seconds while this worker leads, until shutdown;
    ``pause(interval)``, when given, is the wait between two steps instead (a loop that
    wakes for its own reasons, at most ``interval`` apart)."""
    guard = UnexpectedErrorGuard(name, deps.log, leader=True, meters=deps.meters)
    backoff = Backoff()
    while not deps.state.shutdown_event.is_set():
        if still_leading(deps):
            deps.liveness.tick(name, period=interval)
            try:
                await timed(deps, name, step)
                deps.database.succeeded()
                backoff.reset()
                guard.succeeded()
            except TRANSIENT_ERRORS as exc:
                deps.database.failed(name, exc)
                await retry_pause(
                    deps.database, min(interval, backoff.next()), deps.state.shutdown_event
                )
                continue
            except Exception as exc:
                guard.failed(exc)
            if pause is None:
                await wait_or_shutdown(deps, interval)
            else:
                await pause(interval)
        else:
            deps.liveness.forget(name)  # a closed gate must not look like a stalled loop
            await wait_any(deps.state.is_leader, deps.state.shutdown_event)
    deps.liveness.forget(name)


async def run_scheduled(
    deps: WorkerDeps,
    name: str,
    schedule: Schedule,
    step: Callable[[], Awaitable[Any]],
    *,
    recheck: float,
) -> None:
    """Run ``step`` at each fire time of ``schedule`` while this worker leads, until shutdown.

    The next fire time is planned from ``deps.clock.now()`` each time this worker starts
    leading (and after each run): a fire time that passed while another worker led, or none
    did, is not caught up; the next one comes, and a prune then moves everything past its
    retention anyway. The wait re-reads the clock at least every ``recheck`` seconds, so a
    clock step (NTP, a suspended host) or a test's FakeClock is noticed, and so is a
    leadership loss, which re-plans. The loop is not tracked by the stale-loop watchdog while
    it waits (its period would be a day); it ticks while the step runs. Transient database
    errors retry the same fire time with backoff while this worker still leads.
    """
    guard = UnexpectedErrorGuard(name, deps.log, leader=True, meters=deps.meters)
    try:
        while not deps.state.shutdown_event.is_set():
            deps.liveness.forget(name)
            if not still_leading(deps):
                await wait_any(deps.state.is_leader, deps.state.shutdown_event)
                continue
            term = deps.state.leader_since  # a new term (lost and won again) re-plans too
            fire = schedule.next_fire(deps.clock.now())
            deps.log.info(
                "sweep_planned", loop=name, next_fire=fire.isoformat(), schedule=str(schedule)
            )
            if await _wait_for_fire(deps, fire, term, recheck):
                await _run_fire(deps, name, step, guard, term)
    finally:
        deps.liveness.forget(name)


def _leading(deps: WorkerDeps, term: float) -> bool:
    """Whether this worker still leads, on a live lease, in the term that began at ``term``."""
    return still_leading(deps) and deps.state.leader_since == term


async def _wait_for_fire(deps: WorkerDeps, fire: datetime, term: float, recheck: float) -> bool:
    """Wait until the clock reaches ``fire``; False when shutdown or a lost lead ends it."""
    while not deps.state.shutdown_event.is_set() and _leading(deps, term):
        remaining = (fire - deps.clock.now()).total_seconds()
        if remaining <= 0:
            return True
        await wait_any(deps.state.shutdown_event, timeout=min(remaining, recheck))
    return False


async def _run_fire(
    deps: WorkerDeps,
    name: str,
    step: Callable[[], Awaitable[Any]],
    guard: UnexpectedErrorGuard,
    term: float,
) -> None:
    """Run one fire of ``step``: again after a transient error, while leading."""
    backoff = Backoff()
    while not deps.state.shutdown_event.is_set() and _leading(deps, term):
        deps.liveness.tick(name, period=progress_period(deps.settings))
        try:
            await timed(deps, name, step)
        except TRANSIENT_ERRORS as exc:
            deps.database.failed(name, exc)
            await retry_pause(deps.database, backoff.next(), deps.state.shutdown_event)
            continue
        except Exception as exc:
            guard.failed(exc)  # logged; raises past the streak limit
            return
        deps.database.succeeded()
        guard.succeeded()
        return


async def timed(deps: WorkerDeps, name: str, step: Callable[[], Awaitable[Any]]) -> None:
    """Run one pass of leader loop ``name``, its duration recorded (``taskq.maintenance.
    duration``) whether it succeeds or fails."""
    started = deps.clock.monotonic()
    try:
        await step()
    finally:
        seconds = deps.clock.monotonic() - started
        deps.meters.maintenance_duration.record(seconds, labels(loop=name))


async def wait_or_shutdown(deps: WorkerDeps, seconds: float) -> None:
    """Sleep ``seconds`` unless shutdown begins first."""
    await wait_any(deps.state.shutdown_event, timeout=seconds)
