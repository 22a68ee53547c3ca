"""Archive expiry: archived jobs past their ``expire_at`` are deleted, under the
``taskq:archive_expiry`` lock, TASKQ_PRUNE_BATCH_SIZE per committed batch."""

from __future__ import annotations

from taskq_core.constants import ARCHIVE_EXPIRY_LOCK
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.sweeps.progress import batch_beat


class ArchiveExpirySweep:
    """Deletes expired archived jobs at the fire times of the archive expiry schedule; each
    committed batch ticks loop ``beat``."""

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
