"""The leader's maintenance passes, each a small class with ``run_once`` returning a result.

Every predicate runs on the database clock inside the backend; these classes only decide
*when* to ask, and log what each pass did. Tests call ``run_once`` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from taskq_core.backend.protocol.batches import BatchTransition
from taskq_core.backend.protocol.retention import PrunePolicy, PruneResult
from taskq_core.constants import (
    ARCHIVE_EXPIRY_LOCK,
    JOBS_VACUUM_DEAD_FRACTION,
    JOBS_VACUUM_MIN_DEAD,
    JOBS_VACUUM_TIMEOUT,
    PRUNE_LOCK,
    STALE_WORKER_RETENTION,
)
from taskq_core.liveness import worker_is_alive
from taskq_core.obs.metrics import count_batch_end, labels
from taskq_core.retention import prune_policy
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps

# A workers row is deleted once silent for this many leases, when that is longer than
# STALE_WORKER_RETENTION (a deployment with hour-long leases).
STALE_WORKER_LEASES = 10
# Batches one complete_stale_batches statement ends; the sweep repeats until a short answer.
STALE_BATCHES_PER_CALL = 100
# Limiter state (token buckets, sliding-window entries) unused this long past its rest time
# goes: keyed limits leave one instance per key they ever saw. Looked for every few minutes
# (each look reads the limiter tables whole), a bounded number of keys per call.
LIMITER_STATE_IDLE = timedelta(hours=1)
LIMITER_STATE_SWEEP_EVERY = 300.0
LIMITER_STATE_PER_CALL = 1000


def progress_period(settings: TaskqSettings) -> float:
    """The longest a running sweep goes between two progress beats (its liveness period):
    one batch is one statement, which the pool's command timeout
    (TASKQ_DISPATCHER_COMMAND_TIMEOUT) bounds; never less than the leader's sweep cadence."""
    return max(settings.sweep_interval, settings.dispatcher_command_timeout)


def batch_beat(deps: WorkerDeps, beat: str) -> Callable[[int], None]:
    """An ``on_batch`` callback that ticks loop ``beat``: a sweep of millions of rows runs for
    minutes, and each committed batch is progress, so the stale-loop watchdog never takes it
    for a hung loop."""

    def committed(rows: int) -> None:
        deps.liveness.tick(beat, period=progress_period(deps.settings))

    return committed


def stale_worker_threshold(settings: TaskqSettings) -> timedelta:
    """How long a workers row stays after its worker was last heard from.

    Far past any lease: a worker counts as gone after ``liveness.worker_stale_after`` (40 s
    at the defaults), every job it held is reclaimable one lease after its last beat, and a
    worker that misses TASKQ_MAX_HEARTBEAT_FAILURES beats gives its jobs up itself. Nothing
    about a worker silent for ten leases can still matter to a job; the row stays a day
    anyway so ``taskq workers list`` and job details still name who ran last night's jobs.
    """
    return max(STALE_WORKER_RETENTION, STALE_WORKER_LEASES * settings.lock_lease_delta)


def batch_retention(policy: PrunePolicy) -> timedelta:
    """How long an ended batch row stays: the longest retention of any terminal status."""
    return max(policy.retention.values())


def _by_status_and_queue(result: PruneResult) -> dict[str, dict[str, int]]:
    """``{status: {queue: jobs}}``: the moved counts as a log line (JSON) reads them."""
    counts: dict[str, dict[str, int]] = {}
    for (status, queue), moved in sorted(result.moved.items()):
        counts.setdefault(status.value, {})[queue] = moved
    return counts


@dataclass(frozen=True)
class SweepResult:
    """What one maintenance sweep changed."""

    reclaimed: int
    deadline_failed: int
    results_expired: int
    reservation_slots_freed: int = 0
    batches_completed: int = 0
    idle_limiter_keys_deleted: int = 0


class ScheduledPromotion:
    """Sweep 3: scheduled jobs that are due become pending (the backend NOTIFYs)."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps

    async def run_once(self) -> int:
        """Promote due jobs; returns how many."""
        promoted = await self.deps.backend.scheduled_to_pending()
        if promoted:
            self.deps.meters.scheduled_promoted.add(promoted)
        return promoted


class MaintenanceSweep:
    """Sweeps 1, 2 and 4 plus result expiry: reclaim expired locks, fail missed deadlines,
    free leaked reservation slots (lease run out, or their job ended without a release); then
    end the active batches with no child left to wait for (``complete_stale_batches``): the
    children this pass reclaimed or failed had no worker to run the batch hook, nor had a
    child cancelled by an operator, one whose worker died before its hook, or an empty batch.

    Reclaiming waits until this worker has led, and the database has answered it, for two
    heartbeat intervals: leases that ran out while the database was away (or while nobody
    led) ran out because no worker could renew them, and the workers still holding those
    jobs renew them, or write their outcomes, within a heartbeat of the database's return.
    """

    def __init__(self, deps: WorkerDeps, *, beat: str = "sweeps") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it
        self._limiter_state_due = 0.0  # monotonic time of the next idle limiter state sweep

    def reclaim_allowed(self) -> bool:
        """Whether expired leases may be taken from their workers now."""
        deps = self.deps
        settled = deps.clock.monotonic() - 2 * deps.settings.heartbeat_interval
        return deps.leader_since <= settled and deps.database.available_since <= settled

    async def run_once(self) -> SweepResult:
        """One pass of every sweep."""
        settings, backend = self.deps.settings, self.deps.backend
        reclaimed = 0
        if self.reclaim_allowed():
            reclaimed = await backend.reclaim_expired_locks(
                timedelta(seconds=settings.cancellation_grace_period),
                timedelta(seconds=settings.cleanup_grace_period),
                poison_reclaims=settings.poison_reclaims,
            )
        failed = await backend.deadline_sweep()
        expired = await backend.expire_results(on_batch=batch_beat(self.deps, self.beat))
        freed = await backend.sweep_leaked_reservation_slots()
        ended = await self.complete_stale_batches()
        idle_state = await self.sweep_idle_limiter_state()
        result = SweepResult(reclaimed, failed, expired, freed, len(ended), idle_state)
        self._count(result)
        if reclaimed or failed or expired or freed or ended or idle_state:
            self.deps.log.info(
                "sweep_ran",
                reclaimed=reclaimed,
                deadline_failed=failed,
                results_expired=expired,
                reservation_slots_freed=freed,
                batches_completed=len(ended),
                idle_limiter_keys_deleted=idle_state,
            )
        return result

    def _count(self, result: SweepResult) -> None:
        meters = self.deps.meters
        for counter, value in (
            (meters.reclaimed_jobs, result.reclaimed),
            (meters.deadline_failed, result.deadline_failed),
            (meters.results_expired, result.results_expired),
            (meters.leaked_slots_freed, result.reservation_slots_freed),
        ):
            if value:
                counter.add(value)

    async def sweep_idle_limiter_state(self) -> int:
        """Every LIMITER_STATE_SWEEP_EVERY seconds, delete the limiter state idle past
        LIMITER_STATE_IDLE, a bounded call at a time; how many buckets and window keys went."""
        now = self.deps.clock.monotonic()
        if now < self._limiter_state_due:
            return 0
        self._limiter_state_due = now + LIMITER_STATE_SWEEP_EVERY
        deleted = 0
        while True:
            swept = await self.deps.backend.sweep_idle_limiter_state(
                LIMITER_STATE_IDLE, LIMITER_STATE_PER_CALL
            )
            deleted += sum(swept)
            if max(swept) < LIMITER_STATE_PER_CALL:
                return deleted
            batch_beat(self.deps, self.beat)(sum(swept))

    async def complete_stale_batches(self) -> list[BatchTransition]:
        """End every active batch whose children are all terminal, a bounded call at a
        time; each one ended is logged (its finalizer was enqueued with it)."""
        ended: list[BatchTransition] = []
        while True:
            batch = await self.deps.backend.complete_stale_batches(STALE_BATCHES_PER_CALL)
            for transition in batch:
                count_batch_end(self.deps.meters, transition.status.value, "sweep")
                finalizer = transition.finalizer_job_id
                self.deps.log.info(
                    "stale_batch_completed",
                    batch_id=str(transition.batch_id),
                    status=transition.status.value,
                    finalizer_job_id=None if finalizer is None else str(finalizer),
                )
            ended.extend(batch)
            if len(batch) < STALE_BATCHES_PER_CALL:
                return ended
            batch_beat(self.deps, self.beat)(len(batch))


class StrandedQueues:
    """Warns about queues with waiting jobs that no live worker consumes."""

    def __init__(self, deps: WorkerDeps, *, stale_after: timedelta) -> None:
        self.deps = deps
        self.stale_after = stale_after  # liveness.worker_stale_after: explain's and top's too

    async def run_once(self) -> list[str]:
        """Names of stranded queues (also logged)."""
        backend = self.deps.backend
        # One index probe per queue, not a count over the whole jobs table.
        waiting = set(await backend.waiting_queues())
        if not waiting:
            return []
        now = self.deps.clock.now()
        consumed: set[str] = set()
        for worker in await backend.list_workers():
            if worker_is_alive(worker, now, self.stale_after):
                consumed.update(worker.queues)
        stranded = sorted(waiting - consumed)
        if stranded:
            self.deps.log.warning(
                "stranded_queues",
                queues=stranded,
                note="jobs wait in queues no live worker consumes",
            )
        return stranded


class PruneSweep:
    """Sweep 5: move terminal jobs past their retention to the archive, under the
    ``taskq:prune`` lock (a second leader, or an operator's ``taskq prune``, skips)."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "prune") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name each committed batch ticks

    async def run_once(self) -> PruneResult | None:
        """Prune with the settings' policy; None when another holder had the lock."""
        deps = self.deps
        policy = prune_policy(deps.settings)
        started = deps.clock.monotonic()
        async with deps.backend.sweep_lock(PRUNE_LOCK) as got:
            if not got:
                deps.log.info("prune_skipped", lock=PRUNE_LOCK, reason="another prune is running")
                return None
            result = await deps.backend.prune_jobs(policy, on_batch=batch_beat(deps, self.beat))
            for (status, queue), moved in result.moved.items():
                attributes = {"taskq.job.status": status.value, "messaging.destination.name": queue}
                deps.meters.pruned_jobs.add(moved, labels(**attributes))
            deps.log.info(
                "prune_ran",
                moved=_by_status_and_queue(result),
                total=result.total,
                batches=result.batches,
                batch_size=policy.batch_size,
                seconds=round(deps.clock.monotonic() - started, 3),
            )
            # After the jobs: a batch row goes only once no child of it is left in jobs.
            await self.prune_batches(policy)
        return result

    async def prune_batches(self, policy: PrunePolicy) -> int:
        """Delete ended batch rows past the longest retention of ``policy`` (a batch outlives
        every child the prune keeps); logs and returns how many."""
        deps = self.deps
        older_than = batch_retention(policy)
        deleted = await deps.backend.prune_old_batches(older_than)
        if deleted:
            deps.meters.pruned_batches.add(deleted)
        deps.log.info(
            "batches_pruned", deleted=deleted, older_than_seconds=older_than.total_seconds()
        )
        return deleted


class ArchiveExpirySweep:
    """Sweep 6: delete archived jobs past their ``expire_at``, under the
    ``taskq:archive_expiry`` lock, TASKQ_PRUNE_BATCH_SIZE per committed batch."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "archive_expiry") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name each committed batch ticks

    async def run_once(self) -> int | None:
        """Jobs deleted from the archive; None when another holder had the lock."""
        deps = self.deps
        started = deps.clock.monotonic()
        async with deps.backend.sweep_lock(ARCHIVE_EXPIRY_LOCK) as got:
            if not got:
                deps.log.info(
                    "archive_expiry_skipped",
                    lock=ARCHIVE_EXPIRY_LOCK,
                    reason="another archive expiry is running",
                )
                return None
            deleted = await deps.backend.expire_archive(
                deps.settings.prune_batch_size, on_batch=batch_beat(deps, self.beat)
            )
        if deleted:
            deps.meters.archive_expired.add(deleted)
        deps.log.info(
            "archive_expiry_ran",
            deleted=deleted,
            seconds=round(deps.clock.monotonic() - started, 3),
        )
        return deleted


class StaleWorkerCleanup:
    """Deletes ``workers`` rows not heard from for ``stale_worker_threshold``."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.older_than = stale_worker_threshold(deps.settings)

    async def run_once(self) -> int:
        """How many rows were deleted (logged when any)."""
        deleted = await self.deps.backend.delete_stale_workers(self.older_than)
        if deleted:
            self.deps.meters.stale_workers_deleted.add(deleted)
            self.deps.log.info(
                "stale_workers_deleted",
                deleted=deleted,
                silent_for_seconds=self.older_than.total_seconds(),
            )
        return deleted


class JobsVacuum:
    """Vacuums the jobs table when dead rows pile up faster than autovacuum clears them
    (TASKQ_JOBS_VACUUM_ENABLED): the dispatch index stays short, and a long drain keeps its
    rate."""

    def __init__(self, deps: WorkerDeps, *, beat: str = "jobs_vacuum") -> None:
        self.deps = deps
        self.beat = beat  # the liveness name of the loop that runs it

    async def run_once(self) -> bool:
        """Whether it vacuumed (logged with how long it took)."""
        deps = self.deps
        # A vacuum of a big table runs for a while: say so before the watchdog wonders.
        deps.liveness.tick(self.beat, period=JOBS_VACUUM_TIMEOUT)
        started = deps.clock.monotonic()
        vacuumed = await deps.backend.vacuum_jobs(JOBS_VACUUM_MIN_DEAD, JOBS_VACUUM_DEAD_FRACTION)
        if vacuumed:
            deps.log.info("jobs_vacuumed", seconds=round(deps.clock.monotonic() - started, 3))
        return vacuumed
