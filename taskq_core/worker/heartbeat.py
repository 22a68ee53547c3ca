"""HeartbeatLoop: proves this worker alive, keeps the leases it holds, and drives cancellation.

Each tick is one backend transaction: the worker row, the leases of exactly the jobs this
worker holds (claimed, running or being written; nothing else it owns in the database is
renewed, so a row it no longer holds expires and is reclaimed), reservation leases, the
leader ping, and the held jobs' cancel flags; then, while jobs hold reservation slots, one
statement renews those slots' leases, and a worker with rate limits counts the live workers
running each limited actor (also once at start). A held lease the database refuses (reclaimed,
or a later attempt) is lost: the job is stopped locally and nothing is written for it. Then
the cancel controller acts and writes abandonments after the transaction. A cancel NOTIFY
wakes the loop early for a cheap cancel-flag poll.

When the database is away, ticks fail and the worker keeps running. After more than
TASKQ_MAX_HEARTBEAT_FAILURES failed ticks in a row, or once a held lease may have run out
(its last renewal older than TASKQ_LOCK_LEASE less one heartbeat interval), the worker
isolates itself: it gives up every job it holds but those being written (a fenced write is
safe whenever it lands), cancelling the running ones, because another worker may be
running them soon. When the database answers again, the first tick hands those jobs back
(``release_leases``: a never-started job goes back to pending without using an attempt) and
the worker carries on.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from taskq_core.backend.protocol import ErrorInfo, Lease
from taskq_core.liveness import worker_is_alive, worker_stale_after
from taskq_core.worker.active import Stage
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.transient import TRANSIENT_ERRORS, UnexpectedErrorGuard
from taskq_core.worker.waits import wait_any

if TYPE_CHECKING:
    from taskq_core.worker.stall import StallGuard

ISOLATION_RETRY_DELAY = timedelta(seconds=5)


class HeartbeatLoop:
    """Heartbeat plus cancel polling for one worker."""

    def __init__(
        self,
        deps: WorkerDeps,
        controller: CancelController,
        stall_guard: StallGuard | None = None,
    ) -> None:
        self.deps = deps
        self.controller = controller
        self.stall_guard = stall_guard  # told when a wait ends a whole interval late
        self.failures = 0
        self.isolated = False
        self.to_release: list[Lease] = []
        self.ran: set[UUID] = set()  # of those, the jobs whose bodies ran here
        self._guard = UnexpectedErrorGuard("heartbeat", deps.log, meters=deps.meters)

    async def run_once(self) -> int:
        """One full heartbeat; returns how many leases were extended."""
        deps = self.deps
        began = deps.clock.monotonic()
        held = deps.active.leases()
        result = await deps.backend.heartbeat(
            deps.worker_id,
            deps.settings.lock_lease_delta,
            [h.lease for h in held],
            is_leader=deps.state.is_leader.is_set(),
        )
        deps.meters.heartbeat_duration.record(deps.clock.monotonic() - began)
        deps.database.succeeded()
        await self._renew_reservations(result.held)
        await self._count_fleet()
        await self._read_queue_caps()
        if not result.registered and deps.state.info is not None:
            # The leader's stale-worker cleanup removed our row while we were silent.
            await deps.backend.register_worker(deps.state.info)
            deps.log.warning("worker_reregistered", worker_id=str(deps.worker_id))
        for holding in held:
            if holding.job.id in result.extended:
                holding.renewed_at = began
            elif holding.job.id in result.held:
                pass  # being written by another statement right now: still ours
            elif holding.stage is not Stage.SETTLING and deps.active.get(holding.job.id) is holding:
                # A settling job's own write decides; anything else refused is not ours.
                self.controller.lose(holding, "lease_refused")
        if self.to_release:
            await self._release_given_up()
        self.controller.observe(result.cancel_flags)
        try:
            await self.controller.advance()
        finally:
            await self.controller.run_post_tx()
        return result.leases_extended

    async def _renew_reservations(self, held: frozenset[UUID]) -> None:
        """Renew the reservation slots of the jobs the database still counts as this
        worker's (a lost job's slots lapse, and the leaked-slot sweep frees them). A statement
        of its own after the beat, only while some job holds slots."""
        limiter = self.deps.limiter
        if limiter is None:
            return
        holding = [job_id for job_id in limiter.holding() if job_id in held]
        if holding:
            await self.deps.backend.extend_reservation_leases(
                self.deps.worker_id, holding, self.deps.settings.lock_lease_delta
            )

    async def _read_queue_caps(self) -> None:
        """Read the consumed queues' max_concurrent again: a cap set, changed or cleared takes
        effect on its queue's reservation within a beat."""
        limiter = self.deps.limiter
        if limiter is not None:
            limiter.set_queue_caps(await self.deps.backend.get_queue_caps(self.deps.queues))

    async def _count_fleet(self) -> None:
        """Tell the limiter how many live workers run each limited actor: it spaces denied
        jobs for the whole fleet (ratelimit.pacing). Every beat, and once at start."""
        deps, limiter = self.deps, self.deps.limiter
        if limiter is None or not limiter.plans:
            return
        wall, stale_after = deps.clock.now(), worker_stale_after(deps.settings)
        workers = await deps.backend.list_workers()
        live = [w for w in workers if worker_is_alive(w, wall, stale_after)]
        limiter.set_fleet({actor: sum(actor in w.actors for w in live) for actor in limiter.plans})

    async def poll_cancels(self) -> None:
        """The cheap path on a cancel NOTIFY or a due escalation."""
        flags = await self.deps.backend.poll_cancel_flags(self.deps.worker_id)
        self.controller.observe(flags)
        try:
            await self.controller.advance()
        finally:
            await self.controller.run_post_tx()

    async def run(self) -> None:
        """Tick until shutdown; isolate the worker while the database stays away."""
        deps = self.deps
        interval = deps.settings.heartbeat_interval
        next_beat = deps.clock.monotonic() + interval  # registration counted as the first beat
        try:  # the jobs claimed before the first beat are spaced for the fleet too
            await self._count_fleet()
        except TRANSIENT_ERRORS as exc:
            deps.database.failed("heartbeat", exc)  # counted again at the next beat
        async with deps.backend.subscribe_cancel_wake() as cancel_wake:
            while not deps.state.shutdown_event.is_set():
                deps.liveness.tick("heartbeat", period=interval)
                now = deps.clock.monotonic()
                try:
                    if now >= next_beat or self.failures:
                        next_beat = now + interval
                        await self.run_once()
                        self.failures = 0
                    else:
                        await self.poll_cancels()
                    self._guard.succeeded()
                except TRANSIENT_ERRORS as exc:
                    self.failures += 1
                    deps.database.failed("heartbeat", exc)
                    if self._must_isolate():
                        self.isolate()
                except Exception as exc:
                    self._guard.failed(exc)
                cancel_wake.clear()
                wake_at = next_beat
                deadline = self.controller.next_deadline()
                if deadline is not None:
                    wake_at = min(wake_at, deadline)
                waited_from = deps.clock.monotonic()
                timeout = max(0.0, wake_at - waited_from)
                wakers = [cancel_wake, deps.state.shutdown_event]
                if self.failures:  # beat again as soon as another loop sees the database
                    wakers.append(deps.database.available)
                await wait_any(*wakers, timeout=timeout)
                if self.stall_guard is not None:
                    self.stall_guard.check_wake(waited_from + timeout, deps.clock.monotonic())
        deps.liveness.forget("heartbeat")

    def _must_isolate(self) -> bool:
        """Too many failed ticks in a row, or a held lease may already have run out."""
        deps = self.deps
        if self.failures > deps.settings.max_heartbeat_failures:
            return True
        now = deps.clock.monotonic()
        return any(
            deps.active.expired(h, now)
            for h in deps.active.leases()
            if h.stage is not Stage.SETTLING
        )

    def isolate(self) -> None:
        """Give up every held job not being written: another worker may soon run them."""
        deps = self.deps
        given_up = [h for h in deps.active.leases() if h.stage is not Stage.SETTLING]
        if not given_up:
            return
        if not self.isolated:
            self.isolated = True
            deps.meters.isolations.add(1)
            deps.log.error(
                "heartbeat_lost_isolating",
                failures=self.failures,
                jobs=len(given_up),
                note="the jobs are cancelled here and handed back once the database answers",
            )
        for holding in given_up:
            if holding.stage is Stage.RUNNING:  # it ran, its start written or not
                self.ran.add(holding.job.id)
            self.controller.lose(holding, "heartbeat_lost")
            self.to_release.append(holding.lease)

    async def _release_given_up(self) -> None:
        """Hand back what the worker gave up while it was cut off (fenced by each lease)."""
        deps = self.deps
        # A job claimed again since (it was reclaimed meanwhile) is held anew: not ours to give.
        current = {h.job.id for h in deps.active.leases()}
        leases = [lease for lease in self.to_release if lease.job_id not in current]
        error = ErrorInfo("HeartbeatLost", f"worker {deps.worker_id} lost its heartbeat")
        released = await deps.backend.release_leases(
            deps.worker_id,
            leases,
            reason="heartbeat_lost",
            retry_delay=ISOLATION_RETRY_DELAY,
            error=error,
            ran=self.ran,
        )
        self.to_release = []
        self.ran = set()
        self.isolated = False
        deps.log.info("isolation_ended", given_back=released, leases=len(leases))
