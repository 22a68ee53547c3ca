"""Progress reports on the worker's side: numbered, written to the job's row at most once per
flush interval (the last one always, before the outcome), fenced by the lease, and never a
reason for a job to fail."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
import structlog

from taskq_core import JobContext, RetryPolicy, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import JobRow, Lease
from taskq_core.client import JobsClient
from taskq_core.clock import FakeClock, SystemClock
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.obs.logs import configure_logging, get_logger, reset_logging
from taskq_core.progress import ProgressReport
from taskq_core.statemachine import JobStatus
from taskq_core.worker.progress import JobProgress
from taskq_core.worker.runtime import Worker
from taskq_core.worker.transient import DatabaseOutage
from tests.conformance.states import running_job
from tests.obs import progress_log_actors as actors
from tests.worker.conftest import fast_settings

HOUR = 3600.0


class CountingBackend(InMemoryBackend):
    """The memory backend, counting progress writes; ``failures`` are raised first, one per
    write."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.progress_writes: list[int] = []
        self.failures: list[Exception] = []
        self.always_fail: Exception | None = None
        self.wrote = asyncio.Event()

    async def write_progress(self, lease: Lease, seq: int, state: dict[str, Any]) -> bool:
        self.progress_writes.append(seq)
        self.wrote.set()
        if self.always_fail is not None:
            raise self.always_fail
        if self.failures:
            raise self.failures.pop(0)
        return await super().write_progress(lease, seq, state)


@pytest.fixture
def json_logs() -> Iterator[None]:
    configure_logging(fmt="json", level="INFO")
    yield
    reset_logging()
    structlog.reset_defaults()


async def started(backend: InMemoryBackend) -> JobRow:
    job, _ = await running_job(backend)
    return job


def progress_for(
    backend: InMemoryBackend,
    job: JobRow,
    *,
    interval: float = HOUR,
    clock: Any = None,
    lease: Lease | None = None,
    lost: bool = False,
) -> JobProgress:
    clock = clock or FakeClock()
    log = get_logger("test")
    return JobProgress(
        lease or job.lease(),
        seq=job.progress_seq,
        backend=backend,
        clock=clock,
        interval=interval,
        log=log,
        database=DatabaseOutage(clock, log),
        lost=lambda: lost,
    )


async def stored(backend: InMemoryBackend, job_id: UUID) -> ProgressReport | None:
    row = await backend.get(job_id)
    assert row is not None
    return ProgressReport.of_row(row)


# --- JobProgress ------------------------------------------------------------------------------


async def test_many_reports_within_one_interval_are_one_write() -> None:
    backend = CountingBackend()
    job = await started(backend)
    progress = progress_for(backend, job)
    for index in range(1, 101):
        progress.report(index, 100, f"item {index}")  # an actor that never yields
    await progress.finish(write=True)
    assert backend.progress_writes == [100]
    report = await stored(backend, job.id)
    assert report is not None and (report.seq, report.current, report.message) == (
        100,
        100,
        "item 100",
    )


async def test_one_write_per_interval_and_the_last_report_before_the_outcome() -> None:
    backend = CountingBackend()
    clock = FakeClock()
    job = await started(backend)
    progress = progress_for(backend, job, clock=clock)
    progress.report(1, 10, None)
    await backend.wrote.wait()  # the first report is written at once
    for index in range(2, 6):
        progress.report(index, 10, None)
        await asyncio.sleep(0)  # the actor yields: still inside the interval
    assert backend.progress_writes == [1]
    clock.advance(HOUR)
    backend.wrote.clear()
    progress.report(6, 10, None)  # the interval has passed: written at once
    await backend.wrote.wait()
    for index in range(7, 10):
        progress.report(index, 10, None)
    await progress.finish(write=True)
    assert backend.progress_writes == [1, 6, 9]
    report = await stored(backend, job.id)
    assert report is not None and report.seq == 9


async def test_a_quiet_actors_latest_report_is_written_when_the_interval_ends() -> None:
    backend = CountingBackend()
    job = await started(backend)
    progress = progress_for(backend, job, interval=0.05, clock=SystemClock())
    progress.report(1, 10, None)
    progress.report(2, 10, None)  # the actor then goes quiet
    async with asyncio.timeout(10):
        while backend.progress_writes != [2]:
            backend.wrote.clear()
            await backend.wrote.wait()
    report = await stored(backend, job.id)
    assert report is not None and report.seq == 2
    await progress.finish(write=True)
    assert backend.progress_writes == [2]


async def test_a_database_error_is_tried_again_at_the_next_flush() -> None:
    backend = CountingBackend()
    clock = FakeClock()
    job = await started(backend)
    progress = progress_for(backend, job, clock=clock)
    backend.failures = [DatabaseUnavailableError("gone")]
    progress.report(1, 10, None)
    await backend.wrote.wait()
    await asyncio.sleep(0)
    assert await stored(backend, job.id) is None  # failed, and nothing raised
    clock.advance(HOUR)
    progress.report(2, 10, None)
    await progress.finish(write=True)
    assert backend.progress_writes == [1, 2]
    report = await stored(backend, job.id)
    assert report is not None and report.seq == 2


async def test_the_last_report_waits_out_a_database_outage() -> None:
    backend = CountingBackend()
    job = await started(backend)
    progress = progress_for(backend, job)
    backend.failures = [DatabaseUnavailableError("gone"), DatabaseUnavailableError("gone")]
    progress.report(5, 10, "last")
    await progress.finish(write=True)
    assert backend.progress_writes == [1, 1, 1]
    report = await stored(backend, job.id)
    assert report is not None and (report.current, report.message) == (5, "last")


async def test_a_write_the_lease_refuses_stops_every_later_write() -> None:
    backend = CountingBackend()
    job = await started(backend)
    stranger = Lease(job.id, uuid4(), job.attempt)
    progress = progress_for(backend, job, lease=stranger)
    progress.report(1, 10, None)
    await backend.wrote.wait()
    await asyncio.sleep(0)
    for index in range(2, 5):
        progress.report(index, 10, None)
    await progress.finish(write=True)
    assert backend.progress_writes == [1]
    assert await stored(backend, job.id) is None


@pytest.mark.parametrize("how", ["abandoned", "lease lost"])
async def test_a_job_that_is_gone_drops_its_last_report(how: str) -> None:
    backend = CountingBackend()
    job = await started(backend)
    progress = progress_for(backend, job, lost=how == "lease lost")
    progress.report(1, 10, None)
    await backend.wrote.wait()
    progress.report(2, 10, None)
    await progress.finish(write=how != "abandoned")
    progress.report(3, 10, None)  # a body still running after it was written off
    await asyncio.sleep(0)
    assert backend.progress_writes == [1]


async def test_reports_from_a_thread_keep_their_order() -> None:
    backend = CountingBackend()
    job = await started(backend)
    progress = progress_for(backend, job)

    def body() -> None:
        assert threading.current_thread() is not threading.main_thread()
        for index in range(1, 51):
            progress.report_threadsafe(index, 50, None)

    await asyncio.to_thread(body)
    latest = progress.latest
    assert latest is not None and (latest.seq, latest.current) == (50, 50)
    await progress.finish(write=True)
    report = await stored(backend, job.id)
    assert report is not None and report.current == 50


async def test_bad_values_raise_in_the_actor_and_a_long_message_is_cut() -> None:
    ctx: JobContext[None] = JobContext(uuid4(), 1, uuid4(), "a", "q", None)
    with pytest.raises(TypeError):
        await ctx.report_progress("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        await ctx.report_progress(float("nan"))
    with pytest.raises(ValueError, match="positive"):
        ctx.report_progress_sync(1, 0)
    await ctx.report_progress(1, 2, "fine")  # outside a worker: checked, then nothing


# --- in a worker ------------------------------------------------------------------------------


async def run_worker(backend: InMemoryBackend, registry: list[Any], **overrides: Any) -> int:
    worker = Worker(
        fast_settings(**overrides),
        {ref.name: ref for ref in registry},
        backend=backend,
        until_idle=True,
        install_signal_handlers=False,
    )
    return await asyncio.wait_for(worker.run(), 30)


async def test_a_finished_job_shows_its_last_report() -> None:
    backend = CountingBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(actors.many_reports, {"count": 200})
    assert await run_worker(backend, [actors.many_reports], progress_flush_interval=HOUR) == 0
    row = await backend.get(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED
    report = ProgressReport.of_row(row)
    assert report is not None
    assert (report.seq, report.current, report.total, report.message) == (
        200,
        200,
        200,
        "item 200",
    )
    assert backend.progress_writes == [200]  # 200 reports, one interval: one write


@pytest.mark.usefixtures("json_logs")
async def test_a_failing_progress_write_never_fails_the_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = CountingBackend()
    backend.always_fail = RuntimeError("disk on fire")
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(actors.many_reports, {"count": 3})
    assert await run_worker(backend, [actors.many_reports]) == 0
    row = await backend.get(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED
    assert row.progress_seq == 0
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    failed = [r for r in records if r["event"] == "progress_write_failed"]
    assert failed, records
    assert all(r["job_id"] == str(job.id) and "disk on fire" in r["error"] for r in failed)


@actor(retry=RetryPolicy(max_attempts=2, base=0.01, jitter=0))
async def fails_once(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> str:
    for index in range(1, 6):
        await ctx.report_progress(index, 5, f"attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return "ok"


async def test_a_new_attempt_goes_on_from_the_seq_the_last_one_stored() -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(fails_once, {})
    assert await run_worker(backend, [fails_once]) == 0
    row = await backend.get(job.id)
    assert row is not None and (row.status, row.attempt) == (JobStatus.SUCCEEDED, 2)
    report = ProgressReport.of_row(row)
    assert report is not None and (report.seq, report.message) == (10, "attempt 2")
