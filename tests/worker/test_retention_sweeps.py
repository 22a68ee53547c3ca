"""The leader's retention passes, one run_once each on the memory backend and a FakeClock:
every TASKQ_PRUNE_* and TASKQ_ARCHIVE_* setting changes what they do (which jobs move, in
how many batches, how long the archive keeps them), and each pass skips while another
holder has its lock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import structlog

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import JobRow, WorkerInfo
from taskq_core.backend.protocol.retention import PrunePolicy, PruneResult
from taskq_core.clock import FakeClock
from taskq_core.constants import ARCHIVE_EXPIRY_LOCK, PRUNE_LOCK
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from taskq_core.worker.cancel import CancelController
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.heartbeat import HeartbeatLoop
from taskq_core.worker.sweeps.archive_expiry import ArchiveExpirySweep
from taskq_core.worker.sweeps.maintenance import MaintenanceSweep
from taskq_core.worker.sweeps.prune import PruneSweep
from taskq_core.worker.sweeps.stale_workers import StaleWorkerCleanup, stale_worker_threshold
from tests.conformance.states import running_job
from tests.worker.conftest import fast_settings
from tests.worker.sweep_support import MIDNIGHT, TERMINAL, memory_deps, terminal_job

HOUR = timedelta(hours=1)


async def one_of_each(deps: WorkerDeps) -> dict[JobStatus, JobRow]:
    """A job finished in each terminal status, at the clock's now."""
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    return {status: await terminal_job(backend, clock, status) for status in TERMINAL}


def setup(**settings: Any) -> WorkerDeps:
    return memory_deps(FakeClock(MIDNIGHT), **settings)


async def moved_statuses(deps: WorkerDeps, jobs: dict[JobStatus, JobRow]) -> set[JobStatus]:
    """The statuses whose job left ``jobs`` for the archive."""
    moved = set()
    for status, job in jobs.items():
        if await deps.backend.get(job.id) is None:
            assert await deps.backend.get_archived_job(job.id) is not None
            moved.add(status)
    return moved


@pytest.mark.parametrize(
    ("setting", "statuses"),
    [
        ("prune_retention_succeeded", {JobStatus.SUCCEEDED}),
        ("prune_retention_failed", {JobStatus.FAILED}),
        ("prune_retention_cancelled", {JobStatus.CANCELLED}),
        ("prune_retention_abandoned", {JobStatus.ABANDONED, JobStatus.CRASHED}),
    ],
)
async def test_each_status_retention_setting_moves_its_statuses_after_it(
    setting: str, statuses: set[JobStatus]
) -> None:
    deps = setup(**{setting: "1h"})  # the others keep their defaults (30 or 90 days)
    jobs = await one_of_each(deps)
    deps.clock.advance(HOUR)  # type: ignore[attr-defined]
    assert (await PruneSweep(deps).run_once()) is not None
    assert await moved_statuses(deps, jobs) == set()  # exactly 1h: not older yet
    deps.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]
    result = await PruneSweep(deps).run_once()
    assert result is not None
    assert await moved_statuses(deps, jobs) == statuses
    assert {status for status, _ in result.moved} == statuses


async def test_the_retention_period_applies_to_every_status_without_its_own() -> None:
    deps = setup(prune_retention_period="2h", prune_retention_failed="5h")
    jobs = await one_of_each(deps)
    deps.clock.advance(2 * HOUR + timedelta(seconds=1))  # type: ignore[attr-defined]
    await PruneSweep(deps).run_once()
    assert await moved_statuses(deps, jobs) == set(TERMINAL) - {JobStatus.FAILED}
    deps.clock.advance(3 * HOUR)  # type: ignore[attr-defined]
    await PruneSweep(deps).run_once()
    assert await moved_statuses(deps, jobs) == set(TERMINAL)


async def test_without_retention_settings_nothing_young_moves() -> None:
    deps = setup()
    jobs = await one_of_each(deps)
    deps.clock.advance(timedelta(days=30))  # type: ignore[attr-defined]
    assert await moved_statuses(deps, jobs) == set()
    deps.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]
    await PruneSweep(deps).run_once()
    # succeeded and cancelled keep 30 days by default, the others 90.
    assert await moved_statuses(deps, jobs) == {JobStatus.SUCCEEDED, JobStatus.CANCELLED}


async def test_the_batch_size_setting_sets_the_batches_and_each_batch_ticks_liveness() -> None:
    deps = setup(prune_retention_period="1h", prune_batch_size=2)
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    jobs = [await terminal_job(backend, clock, JobStatus.SUCCEEDED) for _ in range(5)]
    ticks: list[str] = []
    tick = deps.liveness.tick

    def counting(name: str, *, period: float) -> None:
        ticks.append(name)
        tick(name, period=period)

    deps.liveness.tick = counting  # type: ignore[method-assign]
    clock.advance(2 * HOUR)
    with structlog.testing.capture_logs() as logs:
        result = await PruneSweep(deps, beat="prune").run_once()
    assert result is not None and (result.total, result.batches) == (5, 3)  # 2 + 2 + 1
    assert ticks == ["prune"] * 3
    [ran] = [entry for entry in logs if entry["event"] == "prune_ran"]
    queues = {job.queue for job in jobs}  # one queue per job
    assert ran["total"] == 5 and ran["batches"] == 3 and ran["batch_size"] == 2
    assert ran["moved"] == {"succeeded": {queue: 1 for queue in queues}}


async def test_the_archive_retention_setting_sets_expire_at_and_the_expiry_honours_it() -> None:
    deps = setup(prune_retention_period="1h", archive_retention_period="12h")
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    job = await terminal_job(backend, clock, JobStatus.SUCCEEDED)
    clock.advance(2 * HOUR)
    await PruneSweep(deps).run_once()
    archived = await backend.get_archived_job(job.id)
    assert archived is not None
    assert archived.archived_at == clock.now()
    assert archived.expire_at == archived.archived_at + timedelta(hours=12)
    expiry = ArchiveExpirySweep(deps)
    clock.advance(timedelta(hours=12))
    assert await expiry.run_once() == 0
    assert await backend.get_archived_job(job.id) is not None
    clock.advance(timedelta(seconds=1))
    assert await backend.get_archived_job(job.id) is None  # read back until expire_at only
    clock.advance(timedelta(days=1))  # its expire_at's day has ended: the expiry removes it
    with structlog.testing.capture_logs() as logs:
        assert await expiry.run_once() == 1
    assert [e["deleted"] for e in logs if e["event"] == "archive_expiry_ran"] == [1]


async def test_the_archive_expiry_deletes_in_batches_of_the_prune_batch_size() -> None:
    deps = setup(prune_batch_size=2)
    backend = deps.backend
    calls: list[int] = []
    expire = backend.expire_archive

    async def spy(batch_size: int, *, on_batch: Callable[[int], None] | None = None) -> int:
        calls.append(batch_size)
        return await expire(batch_size, on_batch=on_batch)

    backend.expire_archive = spy  # type: ignore[method-assign]
    await ArchiveExpirySweep(deps).run_once()
    assert calls == [2]


async def test_a_prune_skips_while_another_holder_has_the_prune_lock() -> None:
    deps = setup(prune_retention_period="1h")
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    job = await terminal_job(backend, clock, JobStatus.SUCCEEDED)
    clock.advance(2 * HOUR)
    with structlog.testing.capture_logs() as logs:
        async with backend.sweep_lock(PRUNE_LOCK) as got:
            assert got
            assert await PruneSweep(deps).run_once() is None
    assert await backend.get(job.id) is not None
    assert [e["lock"] for e in logs if e["event"] == "prune_skipped"] == [PRUNE_LOCK]
    result = await PruneSweep(deps).run_once()  # released: the next run moves it
    assert result is not None and result.total == 1


async def test_an_archive_expiry_skips_while_another_holder_has_its_lock() -> None:
    deps = setup()
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    job = await terminal_job(backend, clock, JobStatus.SUCCEEDED)
    clock.advance(2 * HOUR)
    policy = PrunePolicy({JobStatus.SUCCEEDED: HOUR}, archive_for=HOUR)
    assert (await backend.prune_jobs(policy)).total == 1
    clock.advance(timedelta(days=1, hours=2))  # past the end of its expire_at's day
    async with backend.sweep_lock(ARCHIVE_EXPIRY_LOCK) as got:
        assert got
        assert await ArchiveExpirySweep(deps).run_once() is None
    assert await ArchiveExpirySweep(deps).run_once() == 1  # the skipped run removed nothing
    assert await backend.get_archived_job(job.id) is None


def test_stale_workers_are_kept_a_day_or_ten_leases_whichever_is_longer() -> None:
    assert stale_worker_threshold(fast_settings()) == timedelta(hours=24)
    long_leases = fast_settings(lock_lease="3h", heartbeat_interval="10m")
    assert stale_worker_threshold(long_leases) == timedelta(hours=30)


async def test_a_worker_row_silent_past_the_threshold_is_deleted() -> None:
    deps = setup()
    backend, clock = deps.backend, deps.clock
    assert isinstance(clock, FakeClock)
    gone, alive = uuid7(), uuid7()
    for worker_id in (gone, alive):
        await backend.register_worker(WorkerInfo(worker_id, "host", 1, ["q"], ["a"], 1))
    await backend.mark_worker_stopped(gone)
    cleanup = StaleWorkerCleanup(deps)
    clock.advance(timedelta(hours=12))
    await backend.register_worker(WorkerInfo(alive, "host", 1, ["q"], ["a"], 1))  # heard from
    clock.advance(timedelta(hours=12))
    assert await cleanup.run_once() == 0  # silent for exactly the threshold
    clock.advance(timedelta(seconds=1))
    with structlog.testing.capture_logs() as logs:
        assert await cleanup.run_once() == 1
    assert {w.id for w in await backend.list_workers()} == {alive}
    assert [e["deleted"] for e in logs if e["event"] == "stale_workers_deleted"] == [1]


async def test_the_maintenance_sweep_clears_expired_results_and_says_so() -> None:
    deps = setup()
    backend, clock = deps.backend, deps.clock
    assert isinstance(clock, FakeClock)
    job, _ = await running_job(backend, result_ttl=timedelta(minutes=10))
    assert await backend.mark_succeeded(job.lease(), {"big": "result"})
    sweep = MaintenanceSweep(deps)
    with structlog.testing.capture_logs() as quiet:
        assert (await sweep.run_once()).results_expired == 0
    assert [e for e in quiet if e["event"] == "sweep_ran"] == []  # nothing done, nothing said
    clock.advance(timedelta(minutes=10, seconds=1))
    with structlog.testing.capture_logs() as logs:
        assert (await sweep.run_once()).results_expired == 1
    assert [e["results_expired"] for e in logs if e["event"] == "sweep_ran"] == [1]
    row = await backend.get(job.id)
    assert row is not None and row.result is None


async def test_a_worker_whose_row_was_cleaned_up_registers_again_at_its_heartbeat() -> None:
    deps = setup()
    backend, clock = deps.backend, deps.clock
    assert isinstance(clock, FakeClock)
    deps.state.info = WorkerInfo(deps.worker_id, "host", 1, ["q"], ["a"], 1)
    await backend.register_worker(deps.state.info)
    clock.advance(timedelta(days=2))  # a host suspended for two days
    assert await StaleWorkerCleanup(deps).run_once() == 1
    with structlog.testing.capture_logs() as logs:
        await HeartbeatLoop(deps, CancelController(deps)).run_once()
    [row] = await backend.list_workers()
    assert row.id == deps.worker_id and row.last_seen_at == clock.now()
    assert [e["event"] for e in logs if e["event"] == "worker_reregistered"] == [
        "worker_reregistered"
    ]


async def test_a_long_archive_expiry_shows_progress_to_the_watchdog_batch_by_batch() -> None:
    deps = setup(prune_retention_period="1h", archive_retention_period="1d", prune_batch_size=2)
    backend, clock = deps.backend, deps.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(clock, FakeClock)
    for _ in range(5):
        await terminal_job(backend, clock, JobStatus.SUCCEEDED)
    clock.advance(2 * HOUR)
    assert (await PruneSweep(deps).run_once() or PruneResult()).total == 5
    clock.advance(timedelta(days=2))
    beats: list[str] = []
    tick = deps.liveness.tick

    def recording(name: str, *, period: float) -> None:
        beats.append(name)
        tick(name, period=period)

    deps.liveness.tick = recording  # type: ignore[method-assign]
    assert await ArchiveExpirySweep(deps).run_once() == 5
    assert beats == ["archive_expiry"] * 3  # batches of 2, 2 and 1
